# Process accounting to a file in /tmp.
_, err = syscall(163, ctypes.c_char_p(b"/tmp/acct"))
decide_errno("acct(/tmp/acct)", err, {"EPERM", "ENOSYS"}, {"ENOENT", "EACCES"})
