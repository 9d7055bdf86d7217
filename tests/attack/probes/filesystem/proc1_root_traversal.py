# Reach files through /proc/1/root (the job's init, a copy of the root spawner).
# (/proc is mounted hidepid=invisible, so ENOENT here means init is hidden: blocked.)
target = "/proc/1/root" + ARGS["secret_file"]
kind, val = attempt(lambda: open(target, "rb").read())
if kind == "ok":
    if has_secret(val):
        escaped(f"read the secret through {target}")
    unclear(f"read {len(val)} bytes through {target}, not the secret")
kind2, val2 = attempt(lambda: os.listdir("/proc/1/root/"))
if kind2 == "ok":
    escaped(f"listed /proc/1/root: {sorted(val2)[:8]} (open of the secret: {val})")
if val in ("ENOENT", "EACCES", "EPERM") and val2 in ("EACCES", "EPERM", "ENOENT"):
    blocked(f"open {target}: {val}; listdir /proc/1/root: {val2}")
unclear(f"open: {val}; listdir: {val2}")
