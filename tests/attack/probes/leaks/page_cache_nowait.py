# preadv2(RWF_NOWAIT) on a host file: EAGAIN unless the page is in the page cache, so it
# tells which pages of a host binary or library others have used, without timing anything
# and without caching the page (what mincore and cachestat would say; neither is
# allowlisted). One read of the interpreter's first page.
fd = os.open("/usr/bin/python3", os.O_RDONLY)
buf = ctypes.create_string_buffer(4096)
iov = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 4096)
ret, err = syscall(327, fd, iov, 1, 0, 0, 0x8)  # preadv2(fd, iov, 1, 0, 0, RWF_NOWAIT)
decide_errno("preadv2(/usr/bin/python3, RWF_NOWAIT)", err, {"EPERM"}, {"EAGAIN", "EOPNOTSUPP"})
