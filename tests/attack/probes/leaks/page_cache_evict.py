# posix_fadvise(POSIX_FADV_DONTNEED) through a read-only fd of a host file: it drops the
# file's clean, unmapped pages from the page cache, the eviction half of a page-cache side
# channel on other jobs and the host. One page of the interpreter, its ELF header, which
# every running python3 maps and advice never evicts: where the call is let through,
# nothing is dropped.
fd = os.open("/usr/bin/python3", os.O_RDONLY)
_, err = syscall(221, fd, 0, 4096, 4)  # fadvise64(fd, 0, 4096, POSIX_FADV_DONTNEED)
decide_errno("fadvise64(/usr/bin/python3, POSIX_FADV_DONTNEED)", err, {"EPERM"}, set())
