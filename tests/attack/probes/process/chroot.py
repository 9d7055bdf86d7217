# chroot into writable space (the first step of the classic chroot break-out).
_, err = syscall(161, ctypes.c_char_p(b"/tmp"))
decide_errno("chroot(/tmp)", err, {"EPERM", "ENOSYS"}, set())
