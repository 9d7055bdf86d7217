# fanotify_init: filesystem-wide event monitoring (FAN_CLASS_NOTIF | FAN_REPORT_FID is
# allowed unprivileged).
fd, err = syscall(300, 0x200, 0)
decide_errno("fanotify_init(FAN_REPORT_FID)", err, {"EPERM", "ENOSYS"}, {"EINVAL"})
