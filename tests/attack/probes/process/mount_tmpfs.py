# mount(2): a tmpfs over /tmp.
_, err = syscall(165, ctypes.c_char_p(b"none"), ctypes.c_char_p(b"/tmp"),
                 ctypes.c_char_p(b"tmpfs"), 0, 0)
decide_errno("mount tmpfs /tmp", err, {"EPERM", "EACCES", "ENOSYS"}, set())
