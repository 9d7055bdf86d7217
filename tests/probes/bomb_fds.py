# fd exhaustion: open /dev/null until refused, then try to raise the limit. Exits 0 with
# the evidence: the errno, how many fds fit, and the rlimit before and after.
import errno, json, os, resource

limit = resource.getrlimit(resource.RLIMIT_NOFILE)
fds, error = [], None
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    error = errno.errorcode.get(e.errno, str(e.errno))
pipe_error = None
try:
    os.pipe()
except OSError as e:
    pipe_error = errno.errorcode.get(e.errno, str(e.errno))
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit[1] * 4, limit[1] * 4))
    raise_error = None
except (ValueError, OSError) as e:
    raise_error = type(e).__name__ + (f":{errno.errorcode.get(e.errno)}" if getattr(e, "errno", None) else "")
for fd in fds:
    os.close(fd)
print(json.dumps({"limit": list(limit), "opened": len(fds), "error": error,
                  "pipe_error": pipe_error, "raise_error": raise_error,
                  "limit_after": list(resource.getrlimit(resource.RLIMIT_NOFILE))}))
