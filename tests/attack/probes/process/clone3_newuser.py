# clone3 with CLONE_NEWUSER: flags behind a pointer, out of the filter's sight.
import struct
args = ctypes.create_string_buffer(struct.pack("=11Q", 0x10000000, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0))
pid, err = syscall(435, args, 88)
if pid == 0:
    os._exit(0)
if err is None:
    os.waitpid(pid, 0)
    escaped(f"clone3(CLONE_NEWUSER) made child {pid}")
decide_errno("clone3(CLONE_NEWUSER)", err, {"ENOSYS", "EPERM"}, set())
