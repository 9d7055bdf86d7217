# userfaultfd (user-mode faults only, allowed unprivileged): the staple of kernel races.
fd, err = syscall(323, 1 | os.O_CLOEXEC)  # UFFD_USER_MODE_ONLY
decide_errno("userfaultfd(UFFD_USER_MODE_ONLY)", err, {"EPERM", "ENOSYS"}, set())
