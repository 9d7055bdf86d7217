# File descriptors inherited from the daemon (its socket, the spawner link, other jobs'
# pipes): fstat every number up to the fd limit.
import resource, stat
soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
open_fds = {}
for fd in range(soft):
    kind, val = attempt(lambda: os.fstat(fd))
    if kind == "ok":
        open_fds[fd] = stat.filemode(val.st_mode)[0]
extra = {fd: t for fd, t in open_fds.items() if fd > 2}
if extra:
    escaped(f"inherited fds beyond stdio: {extra}")
if sorted(open_fds) == [0, 1, 2]:
    blocked(f"only fds 0, 1, 2 are open (checked 0..{soft - 1})")
unclear(f"open fds {open_fds}")
