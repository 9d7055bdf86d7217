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
#
# This file travels as a string and is compiled only by a job or cell that has files:
# compiled up front it cost every ready sandbox and idle session ~0.2 MiB of private
# memory (plan::WARM_BOOTSTRAP, plan::session_program). No triple quote in it.


def _vivarium_inputs(read, count, replace):
    # Place `count` files read with `read(n)` (exactly n bytes, or an OSError, which
    # is the stream's own failure and goes to the caller). Every file's bytes are read,
    # even after a failure to place one, so the stream stays in step. Returns None, or
    # what failed, naming the file (the first failure; nothing after it is placed).
    error = None
    for _ in range(count):
        path = read(int.from_bytes(read(4), "little")).decode("utf-8", "replace")
        mode = int.from_bytes(read(4), "little") or 0o644
        left = int.from_bytes(read(8), "little")
        target = None
        if error is None:
            try:
                target = _vivarium_input_open(path, mode & 0o644, replace)
            except OSError as e:
                error = "input file %r: %s" % (path, e.strerror or e)
        try:
            while left:
                chunk = read(min(left, 1 << 20))
                left -= len(chunk)
                if target is None:
                    continue
                try:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(target[0], view):]
                except OSError as e:  # the sandbox's own limits: ENOSPC, EFBIG...
                    error = "input file %r: %s" % (path, e.strerror or e)
                    _vivarium_input_abandon(target)
                    target = None
            if target is not None:
                done, target = target, None
                _vivarium_input_finish(done)
        except OSError as e:
            if error is None:
                error = "input file %r: %s" % (path, e.strerror or e)
        finally:
            if target is not None:
                _vivarium_input_abandon(target)
    return error


def _vivarium_input_open(path, mode, replace):
    # The file to write, as (fd, directory fd, temporary name or None, name). A job's
    # /work is new: the file is made in place, O_EXCL. In a session (`replace`), where
    # an earlier cell may have left anything at the path, the bytes go to a new
    # temporary file beside it, renamed over the old one once complete, and only if
    # what is there is a regular file (or nothing): a link is replaced, never written
    # through, a read-only file can be sent again, and a failure leaves the old one.
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
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        if not replace:
            fd = os.open(name, flags, mode, dir_fd=at)
            os.fchmod(fd, mode)
            return (fd, at, None, name)
        _vivarium_input_replaceable(name, at)
        for _ in range(8):
            temp = ".vivarium-input-" + os.urandom(8).hex()
            try:
                fd = os.open(temp, flags, 0o600, dir_fd=at)
                break
            except FileExistsError:
                continue
        else:
            raise OSError(17, "no temporary name free")
        os.fchmod(fd, mode)
        return (fd, at, temp, name)
    except BaseException:
        os.close(at)
        raise


def _vivarium_input_replaceable(name, at):
    try:
        st = os.stat(name, dir_fd=at, follow_symlinks=False)
    except FileNotFoundError:
        return
    if (st.st_mode & 0o170000) != 0o100000:
        raise OSError(17, "exists and is not a regular file")


def _vivarium_input_finish(target):
    fd, at, temp, name = target
    try:
        os.close(fd)
        if temp is not None:
            try:
                # Checked again just before: the rename replaces a regular file only.
                _vivarium_input_replaceable(name, at)
                os.rename(temp, name, src_dir_fd=at, dst_dir_fd=at)
            except BaseException:
                try:
                    os.unlink(temp, dir_fd=at)
                except OSError:
                    pass
                raise
    finally:
        os.close(at)


def _vivarium_input_abandon(target):
    fd, at, temp, name = target
    try:
        os.close(fd)
        if temp is not None:
            os.unlink(temp, dir_fd=at)
    except OSError:
        pass
    finally:
        os.close(at)
