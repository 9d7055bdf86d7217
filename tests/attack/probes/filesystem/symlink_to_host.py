# A symlink in /work pointing at the host secret's absolute path.
os.symlink(ARGS["secret_file"], "/work/link")
kind, val = attempt(lambda: open("/work/link", "rb").read())
if kind == "ok":
    if has_secret(val):
        escaped("read the secret through /work/link")
    unclear(f"read {len(val)} bytes, not the secret")
decide_errno(f"open /work/link -> {ARGS['secret_file']}", val, {"ENOENT", "EACCES", "EPERM"}, set())
