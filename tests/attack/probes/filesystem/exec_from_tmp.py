# Drop an executable in /tmp and run it.
with open("/tmp/x.sh", "w") as f:
    f.write("#!/bin/sh\necho ran\n")
os.chmod("/tmp/x.sh", 0o755)
status, line = in_child(lambda: os.execv("/tmp/x.sh", ["/tmp/x.sh"]))
if line.startswith("exception PermissionError"):
    blocked(f"execve /tmp/x.sh: EACCES ({line})")
if line == "" and os.WIFEXITED(status):
    escaped(f"execve /tmp/x.sh succeeded (status {status})")
unclear(f"status {status}, {line}")
