# Write to a host file the test planted world-writable (0666 in a 0777 dir): only isolation
# stands in the way. The test also checks the host file afterwards.
kind, val = attempt(lambda: open(ARGS["canary_file"], "ab").write(b"vivarium probe was here\n"))
if kind == "ok":
    escaped(f"appended {val} bytes to {ARGS['canary_file']}")
decide_errno(f"append {ARGS['canary_file']}", val, {"ENOENT", "EROFS", "EACCES", "EPERM"}, set())
