# perf_event_open with a NULL attr: EFAULT once past the filter.
_, err = syscall(298, 0, 0, -1, -1, 0)
decide_errno("perf_event_open(NULL)", err, {"EPERM", "ENOSYS", "EACCES"}, {"EFAULT", "EINVAL"})
