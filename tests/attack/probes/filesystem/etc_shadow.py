# Read the host's password hashes.
kind, val = attempt(lambda: open("/etc/shadow", "rb").read())
if kind == "ok":
    escaped(f"read {len(val)} bytes of /etc/shadow")
decide_errno("open /etc/shadow", val, {"ENOENT", "EACCES", "EPERM"}, set())
