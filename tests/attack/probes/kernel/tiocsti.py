# TIOCSTI: push input into a terminal. Stdin is a pipe, so past the filter the tty layer
# answers ENOTTY.
_, err = syscall(16, 0, 0x5412, ctypes.c_char_p(b"x"))
decide_errno("ioctl(0, TIOCSTI)", err, {"EPERM", "ENOSYS"}, {"ENOTTY", "EIO", "EINVAL"})
