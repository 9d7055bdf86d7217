# /proc/1/environ: the job's init is a copy of the root spawner and carries the daemon's
# (/proc is mounted hidepid=invisible, so ENOENT here means init is hidden: blocked.)
# environment, secret included.
kind, val = attempt(lambda: open("/proc/1/environ", "rb").read())
if kind == "ok":
    if has_secret(val):
        escaped(f"read {len(val)} bytes of /proc/1/environ, the secret among them")
    unclear(f"read {len(val)} bytes of /proc/1/environ, without the secret")
decide_errno("read /proc/1/environ", val, {"EACCES", "EPERM", "ENOENT"}, set())
