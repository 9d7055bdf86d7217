# kexec_load with no segments and invalid flags.
_, err = syscall(246, 0, 0, 0, 0xdead0000)
decide_errno("kexec_load(invalid)", err, {"EPERM", "ENOSYS"}, {"EINVAL"})
