# io_uring_setup with a NULL params pointer (EFAULT once past the filter). io_uring
# operations would bypass seccomp.
_, err = syscall(425, 1, 0)
decide_errno("io_uring_setup(1, NULL)", err, {"EPERM", "ENOSYS"}, {"EFAULT", "EINVAL"})
