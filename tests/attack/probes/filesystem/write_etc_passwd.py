# Add a user to /etc/passwd.
kind, val = attempt(lambda: open("/etc/passwd", "ab").write(b"evil:x:0:0::/:/bin/sh\n"))
if kind == "ok":
    escaped(f"appended {val} bytes to /etc/passwd")
decide_errno("append /etc/passwd", val, {"EROFS", "EACCES", "EPERM"}, set())
