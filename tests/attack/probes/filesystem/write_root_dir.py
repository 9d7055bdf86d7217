# Create a file in / (the job's root tmpfs, remounted read-only).
kind, val = attempt(lambda: os.close(os.open("/vivarium-probe", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)))
if kind == "ok":
    escaped("created /vivarium-probe")
decide_errno("create /vivarium-probe", val, {"EROFS", "EACCES", "EPERM"}, set())
