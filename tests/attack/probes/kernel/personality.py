# personality(ADDR_NO_RANDOMIZE): switches off ASLR for exec'd children.
ret, err = syscall(135, 0x0040000)
decide_errno("personality(ADDR_NO_RANDOMIZE)", err, {"EPERM", "ENOSYS"}, set())
