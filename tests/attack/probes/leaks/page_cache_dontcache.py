# preadv2(RWF_DONTCACHE) on a host file (Linux 6.14+): the read drops again the pages it
# brought in, so a timed read can test the same uncached page over and over without
# caching it. One read of the interpreter's first page (cached: nothing is dropped).
# EINVAL (an older kernel) or EOPNOTSUPP (a filesystem without it) mean the call was let
# through as much as success does.
fd = os.open("/usr/bin/python3", os.O_RDONLY)
buf = ctypes.create_string_buffer(4096)
iov = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 4096)
ret, err = syscall(327, fd, iov, 1, 0, 0, 0x80)  # preadv2(fd, iov, 1, 0, 0, RWF_DONTCACHE)
decide_errno("preadv2(/usr/bin/python3, RWF_DONTCACHE)", err, {"EPERM"}, {"EINVAL", "EOPNOTSUPP"})
