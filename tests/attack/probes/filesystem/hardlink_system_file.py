# Hard-link a stdlib module into writable /work, to modify it through the link.
kind, val = attempt(lambda: os.link("/usr/lib/python3.11/os.py", "/work/os.py"))
if kind == "ok":
    escaped("linked /usr/lib/python3.11/os.py to /work/os.py")
decide_errno("link os.py -> /work/os.py", val, {"EXDEV", "EPERM", "EACCES", "EROFS"}, set())
