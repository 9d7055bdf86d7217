# Lazily unmount /proc (or anything that an over-mount hides).
_, err = syscall(166, ctypes.c_char_p(b"/proc"), 2)  # MNT_DETACH
decide_errno("umount2(/proc, MNT_DETACH)", err, {"EPERM", "ENOSYS"}, set())
