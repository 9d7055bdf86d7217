# The kernel log: syslog(SYSLOG_ACTION_SIZE_BUFFER).
ret, err = syscall(103, 10, 0, 0)
decide_errno("syslog(SIZE_BUFFER)", err, {"EPERM", "ENOSYS"}, set())
