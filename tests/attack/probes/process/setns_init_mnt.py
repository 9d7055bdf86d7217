# Open init's mount namespace to join it.
# (/proc is mounted hidepid=invisible, so ENOENT here means init is hidden: blocked.)
kind, val = attempt(lambda: os.open("/proc/1/ns/mnt", os.O_RDONLY))
if kind == "ok":
    escaped(f"opened /proc/1/ns/mnt as fd {val}")
decide_errno("open /proc/1/ns/mnt", val, {"EACCES", "EPERM", "ENOENT"}, set())
