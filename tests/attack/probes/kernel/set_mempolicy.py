# NUMA memory policy: set_mempolicy(MPOL_DEFAULT).
ret, err = syscall(238, 0, 0, 0)
decide_errno("set_mempolicy(MPOL_DEFAULT)", err, {"EPERM", "ENOSYS"}, set())
