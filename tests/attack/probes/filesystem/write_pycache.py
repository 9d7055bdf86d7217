# Plant a bytecode file in the stdlib's __pycache__ (imports would load it first).
path = "/usr/lib/python3.11/__pycache__/vivarium_probe.cpython-311.pyc"
kind, val = attempt(lambda: os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)))
if kind == "ok":
    escaped(f"created {path}")
decide_errno(f"create {path}", val, {"EROFS", "EACCES", "EPERM", "ENOENT"}, set())
