# Open raw devices: memory, ports, disks, the kernel log, terminals.
paths = ["/dev/mem", "/dev/kmem", "/dev/port", "/dev/vda", "/dev/sda", "/dev/nvme0n1",
         "/dev/kmsg", "/dev/tty", "/dev/console", "/dev/ptmx", "/dev/fuse", "/dev/kvm",
         "/dev/net/tun", "/dev/vsock", "/dev/userfaultfd"]
seen = {}
for p in paths:
    kind, val = attempt(lambda: os.close(os.open(p, os.O_RDONLY)))
    seen[p] = "opened" if kind == "ok" else val
if "opened" in seen.values():
    escaped(f"opened: {[p for p, v in seen.items() if v == 'opened']}")
if all(v in ("ENOENT", "EACCES", "EPERM") for v in seen.values()):
    blocked(f"no device opened: {sorted(set(seen.values()))} for {len(paths)} paths")
unclear(str(seen))
