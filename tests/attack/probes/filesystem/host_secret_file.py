# Read a host file holding a secret (planted by the test, mode 0644 in a 0755 dir, so only
# isolation, not file permissions, keeps it away).
kind, val = attempt(lambda: open(ARGS["secret_file"], "rb").read())
if kind == "ok":
    if has_secret(val):
        escaped(f"read {len(val)} bytes of {ARGS['secret_file']}, the secret among them")
    unclear(f"read {len(val)} bytes, but not the secret")
decide_errno(f"open {ARGS['secret_file']}", val, {"ENOENT", "EACCES", "EPERM"}, set())
