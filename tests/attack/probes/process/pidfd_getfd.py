# Steal a file descriptor from another process (our own child) with pidfd_getfd.
import signal, time
pid = os.fork()
if pid == 0:
    time.sleep(30)
    os._exit(0)
pidfd = os.pidfd_open(pid)
fd, err = syscall(438, pidfd, 1, 0)  # the child's stdout
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
decide_errno(f"pidfd_getfd(child {pid}, fd 1)", err, {"EPERM", "ENOSYS"}, set())
