# The host's machine id.
seen = {}
for p in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
    kind, val = attempt(lambda: open(p).read())
    seen[p] = "read" if kind == "ok" else val
if "read" in seen.values():
    escaped(f"machine id readable: {seen}")
if all(v in ("ENOENT", "EACCES", "EPERM") for v in seen.values()):
    blocked(str(seen))
unclear(str(seen))
