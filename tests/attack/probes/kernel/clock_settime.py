# Set the host clock: clock_settime(CLOCK_REALTIME) to the current time.
import struct
ts = ctypes.create_string_buffer(16)
syscall(228, 0, ts)  # clock_gettime
_, err = syscall(227, 0, ts)
decide_errno("clock_settime(CLOCK_REALTIME, now)", err, {"EPERM", "ENOSYS"}, set())
