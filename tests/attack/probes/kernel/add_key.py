# add_key: a "user" key with a throwaway payload in the process keyring.
ret, err = syscall(248, ctypes.c_char_p(b"user"), ctypes.c_char_p(b"vivarium-probe"),
                   ctypes.c_char_p(b"x"), 1, -2)
decide_errno("add_key(user, process keyring)", err, {"EPERM", "ENOSYS"}, {"EDQUOT"})
