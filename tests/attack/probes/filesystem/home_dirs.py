# List root's and users' home directories.
seen = {}
for path in ("/root", "/home", "/var/lib", "/srv"):
    kind, val = attempt(lambda: os.listdir(path))
    seen[path] = f"{len(val)} entries" if kind == "ok" else val
if any(v not in ("ENOENT", "EACCES", "EPERM") for v in seen.values()):
    escaped(f"listed: {seen}")
blocked(f"every listdir refused: {seen}")
