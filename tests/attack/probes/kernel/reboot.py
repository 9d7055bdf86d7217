# reboot with invalid magic numbers (harmless even if the call got through).
_, err = syscall(169, 0x1234, 0x5678, 0, 0)
decide_errno("reboot(bad magic)", err, {"EPERM", "ENOSYS"}, {"EINVAL"})
