# Append to a stdlib module: a persistent backdoor for every later job if it worked.
kind, val = attempt(lambda: open("/usr/lib/python3.11/os.py", "ab").write(b"\n# vivarium probe\n"))
if kind == "ok":
    escaped(f"appended {val} bytes to /usr/lib/python3.11/os.py")
decide_errno("append os.py", val, {"EROFS", "EACCES", "EPERM"}, set())
