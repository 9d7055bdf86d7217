# Our own root link, /proc/self/root, followed to the planted host secret.
target = "/proc/self/root" + ARGS["secret_file"]
kind, val = attempt(lambda: open(target, "rb").read())
if kind == "ok":
    if has_secret(val):
        escaped(f"read the secret through {target}")
    unclear(f"read {len(val)} bytes, not the secret")
decide_errno(f"open {target}", val, {"ENOENT", "EACCES", "EPERM"}, set())
