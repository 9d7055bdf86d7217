# bpf(2) with an unknown command: the kernel answers EINVAL once past the filter.
_, err = syscall(321, 9999, 0, 0)
decide_errno("bpf(cmd 9999)", err, {"EPERM", "ENOSYS"}, {"EINVAL", "EFAULT"})
