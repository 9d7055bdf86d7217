# Memory balloon: touch argv[1] MiB (10 GiB in the test) in 64 MiB blocks; bytearray
# zero-fills, so every page is charged to the job's memory cgroup.
import json, sys

blocks, want = [], int(sys.argv[1])
while len(blocks) * 64 < want:
    blocks.append(bytearray(64 << 20))
    print(json.dumps({"allocated_mib": len(blocks) * 64}), flush=True)
print(json.dumps({"allocated_mib": len(blocks) * 64, "done": True}), flush=True)
