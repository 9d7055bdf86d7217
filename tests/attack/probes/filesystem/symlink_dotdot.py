# A relative symlink climbing far above /work, then down to the host secret.
target = "../" * 12 + ARGS["secret_file"].lstrip("/")
os.symlink(target, "/tmp/up")
kind, val = attempt(lambda: open("/tmp/up", "rb").read())
if kind == "ok":
    if has_secret(val):
        escaped(f"read the secret through /tmp/up -> {target}")
    unclear(f"read {len(val)} bytes, not the secret")
decide_errno(f"open /tmp/up -> {target}", val, {"ENOENT", "EACCES", "EPERM"}, set())
