# Allocate argv[1] MiB, touching every page so it is really charged.
import json, sys

chunks = []
for i in range(int(sys.argv[1])):
    b = bytearray(1 << 20)
    for j in range(0, len(b), 4096):
        b[j] = 1
    chunks.append(b)
    if i % 16 == 0:
        print(json.dumps({"allocated_mib": i + 1}), flush=True)
print(json.dumps({"allocated_mib": len(chunks)}), flush=True)
