# The x32 ABI: getpid with the __X32_SYSCALL_BIT set (nr | 0x40000000).
ret, err = syscall(39 | 0x40000000)
if err is None:
    escaped(f"x32 getpid returned {ret}")
decide_errno("x32 getpid", err, {"ENOSYS", "EPERM"}, set())
