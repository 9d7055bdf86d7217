# Follow init's working directory link (/proc/1/cwd) out of our view.
# (/proc is mounted hidepid=invisible, so ENOENT here means init is hidden: blocked.)
kind, val = attempt(lambda: os.listdir("/proc/1/cwd/"))
if kind == "ok":
    escaped(f"listed /proc/1/cwd: {sorted(val)[:8]}")
decide_errno("listdir /proc/1/cwd", val, {"EACCES", "EPERM", "ENOENT"}, set())
