# The kernel keyring: KEYCTL_GET_KEYRING_ID of the session keyring, create = 0.
ret, err = syscall(250, 0, -3, 0)
decide_errno("keyctl(GET_KEYRING_ID, session)", err, {"EPERM", "ENOSYS"}, {"ENOKEY"})
