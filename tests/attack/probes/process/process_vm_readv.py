# Read another process's memory with process_vm_readv (our own child: same uid).
import signal, time
buf = ctypes.create_string_buffer(b"vivarium-probe-marker")
pid = os.fork()
if pid == 0:
    time.sleep(30)
    os._exit(0)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
out = ctypes.create_string_buffer(len(buf.raw))
local = iovec(ctypes.addressof(out), len(out))
remote = iovec(ctypes.addressof(buf), len(buf))
time.sleep(0.05)
n, err = syscall(310, pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
if err is None and out.raw.startswith(b"vivarium-probe-marker"):
    escaped(f"read {n} bytes of the child's memory")
decide_errno(f"process_vm_readv child {pid}", err, {"EPERM", "ENOSYS"}, set())
