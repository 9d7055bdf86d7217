# swapon of a path that does not exist.
_, err = syscall(167, ctypes.c_char_p(b"/nonexistent-vivarium-swap"), 0)
decide_errno("swapon(/nonexistent)", err, {"EPERM", "ENOSYS"}, {"ENOENT"})
