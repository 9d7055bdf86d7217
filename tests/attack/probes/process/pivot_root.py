# pivot_root inside the sandbox.
_, err = syscall(155, ctypes.c_char_p(b"/tmp"), ctypes.c_char_p(b"/tmp"))
decide_errno("pivot_root(/tmp, /tmp)", err, {"EPERM", "ENOSYS"}, set())
