# kcmp: compare kernel objects across processes (address-space and fd probing).
me = os.getpid()
ret, err = syscall(312, me, me, 0, 1, 1)  # KCMP_FILE, fd 1 with itself
decide_errno("kcmp(self, self, KCMP_FILE)", err, {"EPERM", "ENOSYS"}, set())
