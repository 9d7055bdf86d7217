# Vivarium's warm sandbox (run with `python3 <profile flags> -c <this>`). It runs inside a
# sandbox that is already complete: every namespace, the read-only root, dropped
# capabilities, Landlock, seccomp, cgroup limits. It waits for exactly one job on stdin,
# then runs it as `python3 <profile flags> /work/main.py <args>` would, and the process
# ends with the job: no sandbox ever runs a second job.
#
# What runs once the job has come is kept to few objects and few distinct functions: in
# a sandbox forked from a zygote every page the job's Python writes to (a reference
# count is a write) is first copied from the zygote, one page fault each. So the job is
# read with os.read and written with os.open/os.write, not through io's buffered file
# objects, and `atexit` is imported here: importing it at exit ran the import machinery
# in the job (~60 of a `pass` job's ~280 faults, `bench/faults.py`).
import sys, os, atexit

# The profile's `warm.preload` modules (this program's arguments), imported while no job
# is here yet: a job that imports them finds them in sys.modules.
def _vivarium_preload():
    for name in sys.argv[1:]:
        __import__(name)




def _vivarium_job():
    read = os.read

    def exact(n):
        data = read(0, n)
        if len(data) == n:
            return data
        if not data:
            os._exit(0)  # the daemon closed an unused sandbox
        parts = [data]
        n -= len(data)
        while n:
            data = read(0, n)
            if not data:
                os._exit(0)
            parts.append(data)
            n -= len(data)
        return b"".join(parts)

    def item():
        return exact(int.from_bytes(exact(4), "little"))

    argc = int.from_bytes(exact(4), "little")
    args = [os.fsdecode(item()) for _ in range(argc)] if argc else []
    code = item()
    path = "/work/main.py"
    # (As open(path, "wb") would: the same flags and mode, without a buffered writer.)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        left = memoryview(code)
        while left:
            left = left[os.write(fd, left) :]
    finally:
        os.close(fd)
    # The job's input files (inputs.py, before this file in the program).
    count = int.from_bytes(exact(4), "little")
    try:
        error = None
        if count:
            # (Compiled only for a job with files: plan::WARM_BOOTSTRAP.)
            exec(compile(_VIVARIUM_INPUTS_PY, "<vivarium inputs>", "exec"), globals())
            error = _vivarium_inputs(exact, count, False)
    except OSError as e:
        error = "the input files could not be read: %s" % (e.strerror or e)
    if error is not None:
        os.write(2, ("vivarium: %s; the job did not run\n" % error).encode("utf-8", "replace"))
        os._exit(1)
    return path, args, code


def _vivarium_exit(status):
    # What the interpreter's own exit does that a job can observe: wait for non-daemon
    # threads, run atexit handlers (which include weakref.finalize and multiprocessing's),
    # flush stdout and stderr. Then end without tearing the interpreter down: freeing
    # every module and object is what makes exits slow (~15 ms with numpy loaded), and the
    # sandbox is discarded anyway. (`__del__` of objects still alive at exit is not
    # called; Python does not promise it either.)
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            status = 120  # as the interpreter does when a final flush fails
    os._exit(status)


def _vivarium_status(exc):
    # The exit status of SystemExit(exc.code), as the interpreter computes it.
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _vivarium_run():
    path, args, code = _vivarium_job()
    main = type(sys)("__main__")
    main.__file__ = path
    main.__cached__ = None
    sys.modules["__main__"] = main
    sys.argv[:] = [path, *args]
    try:
        exec(compile(code, path, "exec"), main.__dict__)
        status = 0
    except SystemExit as e:
        status = _vivarium_status(e)
    except BaseException as e:
        # Start the traceback in the job's code, as for a script run directly.
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        status = 1
    _vivarium_exit(status)


# (A zygote, see zygote_bootstrap.py, uses the functions above and runs its own loop.)
if "_vivarium_zygote" not in globals():
    _vivarium_preload()
    # The builtin compile()'s first call initializes the interpreter's AST types (as
    # `import _ast` would; ~0.5 ms on a small VM, whatever the source): paid here, not
    # by the job. It adds nothing to sys.modules.
    compile("pass", "<vivarium>", "exec")
    # Ready: one NUL byte on stderr, which the daemon reads before it lists this sandbox
    # as ready (so a job never meets an interpreter that failed to start).
    os.write(2, b"\0")
    _vivarium_run()
