# TIOCSTI with high bits set in the request (CVE-2019-10063: the kernel truncates cmd to
# 32 bits, so a 64-bit filter comparison is bypassed).
_, err = syscall(16, 0, 0x5412 | (1 << 32), ctypes.c_char_p(b"x"))
decide_errno("ioctl(0, TIOCSTI | 1<<32)", err, {"EPERM", "ENOSYS"}, {"ENOTTY", "EIO", "EINVAL"})
