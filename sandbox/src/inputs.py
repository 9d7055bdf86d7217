# Input files (protocol 7), as a warm sandbox's bootstrap and a session's cell loop place
# them: under /work, as the job's own process (its user, its Landlock domain), one path
# component at a time and never through a link, as sandbox/src/inputs.rs does for a cold
# job. The server has checked every path already (vivarium_proto::files); what is refused
# here is what the sandbox's own /work makes unsafe: a component that is a link or not a
# directory, or (`replace`, a session) something at the path that is not a regular file
# of its own.
#
# The stream, after the job's code (warm_header) or at the head of a cell's stdin pipe:
# per file, integers little endian: path_len:u32, path (UTF-8), mode:u32, len:u64, bytes.


def _vivarium_inputs(read, count, replace):
    # Place `count` files read with `read(n)` (exactly n bytes, or an OSError). Every
    # file's bytes are read, even after a failure, so the stream stays in step. Returns
    # None, or what failed, naming the file.
    error = None
    for _ in range(count):
        path = read(int.from_bytes(read(4), "little")).decode("utf-8", "replace")
        mode = int.from_bytes(read(4), "little") or 0o644
        left = int.from_bytes(read(8), "little")
        fd = None
        if error is None:
            try:
                fd = _vivarium_input_open(path, mode & 0o644, replace)
            except OSError as e:
                error = "input file %r: %s" % (path, e.strerror or e)
        try:
            while left:
                chunk = read(min(left, 1 << 20))
                left -= len(chunk)
                if fd is not None:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view):]
        except OSError as e:
            if error is None:
                error = "input file %r: %s" % (path, e.strerror or e)
            if left:
                raise  # the stream itself failed: nothing more can be read
        finally:
            if fd is not None:
                os.close(fd)
    return error


def _vivarium_input_open(path, mode, replace):
    names = path.split("/")
    dir_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    at = os.open("/work", dir_flags)
    try:
        for name in names[:-1]:
            if name in ("", ".", ".."):
                raise OSError(22, "not a normalized path")
            try:
                os.mkdir(name, 0o755, dir_fd=at)
            except FileExistsError:
                pass
            # O_NOFOLLOW with O_DIRECTORY: a link is ELOOP or ENOTDIR, never followed.
            inner = os.open(name, dir_flags, dir_fd=at)
            os.close(at)
            at = inner
        name = names[-1]
        if name in ("", ".", ".."):
            raise OSError(22, "not a normalized path")
        # O_NONBLOCK: a FIFO is not waited on (ENXIO without a reader), only refused.
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        if not replace:
            flags |= os.O_EXCL
        fd = os.open(name, flags, mode, dir_fd=at)
        try:
            st = os.fstat(fd)
            if (st.st_mode & 0o170000) != 0o100000:
                raise OSError(17, "exists and is not a regular file")
            if st.st_nlink != 1:
                raise OSError(31, "exists with other links to it")
            os.ftruncate(fd, 0)
            os.fchmod(fd, mode)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd
    finally:
        os.close(at)
