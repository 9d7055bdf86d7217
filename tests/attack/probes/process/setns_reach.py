# setns: join another namespace. A regular file is not a namespace, so the kernel answers
# EINVAL once the call is past the filter; the filter answers EPERM first.
fd = os.open("/work/main.py", os.O_RDONLY)
_, err = syscall(308, fd, 0)
decide_errno("setns(regular file)", err, {"EPERM", "ENOSYS"}, {"EINVAL"})
