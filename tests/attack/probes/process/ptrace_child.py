# ptrace at all: attach to our own child (same uid, so only the filter refuses it).
import signal, time
pid = os.fork()
if pid == 0:
    time.sleep(30)
    os._exit(0)
_, err = syscall(101, 16, pid, 0, 0)  # PTRACE_ATTACH
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
decide_errno(f"PTRACE_ATTACH own child {pid}", err, {"EPERM", "ENOSYS"}, set())
