

# Vivarium's zygote (appended to the warm bootstrap's functions above; see
# daemon/src/sandbox/zygote.rs). It runs in a sandbox of its own as uid 0 of that
# sandbox's user namespace, and never runs a job: it preloads, then for each request on
# its control socket (fd 3) forks a child that becomes one job's sandbox. The per-job
# setup is Rust, in the zygote library (fd 4), called with the GIL held.
def _vivarium_zygote_main():
    import ctypes, socket, _signal

    lib = ctypes.PyDLL("/proc/self/fd/4")
    os.close(4)
    fork_job = lib.vivarium_zygote_fork_job
    fork_job.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
    fork_job.restype = ctypes.c_int
    # What os.fork does around its fork(), for the fork the library makes: the import
    # lock and the before-fork hooks, the parent's after-fork hooks, and in the job's
    # payload (the one copy that runs Python again) the interpreter's own after-fork
    # repairs and the child hooks (`random` reseeds itself there).
    api = ctypes.pythonapi
    before_fork, after_parent, after_child = (
        api.PyOS_BeforeFork, api.PyOS_AfterFork_Parent, api.PyOS_AfterFork_Child)
    for f in (before_fork, after_parent, after_child):
        f.argtypes, f.restype = [], None

    _vivarium_preload()
    # The compiler's first use costs every job ~2 ms if it happens after the fork.
    compile("pass", "<vivarium>", "exec")
    added = [v for v in os.environ.pop("VIVARIUM_ZYGOTE_ENV", "").split(",") if v]
    # fork copies only the calling thread: a preload that started threads (a BLAS pool,
    # say) would leave every job with a broken copy of it.
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        print(f"vivarium zygote: {threads} threads after the preloads; a zygote must have one", file=sys.stderr)
        os._exit(1)

    ctl = socket.socket(fileno=3)
    sigchld = {_signal.SIGCHLD}

    def reap(*_):
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    _signal.signal(_signal.SIGCHLD, reap)
    # One buffer for every request, cleared after each: no job's plan stays in the
    # zygote's memory for the next job to inherit. It and the fd array are made once:
    # whatever a child does in Python before it is a job writes to pages it shares
    # with the zygote (each write a page copy), so the child's part is one call.
    max_fds = 16
    buf = bytearray(1 << 20)
    plan = (ctypes.c_char * len(buf)).from_buffer(buf)
    fd_array = (ctypes.c_int * max_fds)()
    anc = socket.CMSG_SPACE(max_fds * 4)
    # Every object so far moves to the collector's permanent generation: a collection in
    # a job then never walks (and so never copies, page by page) the zygote's heap.
    import gc

    gc.collect()
    gc.freeze()
    sys.stdout.flush()
    sys.stderr.flush()
    ctl.send(b"ready")
    while True:
        n, ancdata, flags, _ = ctl.recvmsg_into([buf], anc)
        fds = []
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(memoryview(data).cast("i")[: len(data) // 4])
        if n == 0:
            os._exit(0)  # the spawner is gone or retired us
        # SIGCHLD waits until the child's pidfd is sent: the handler must not reap a
        # child that died at once before its pidfd exists.
        _signal.pthread_sigmask(_signal.SIG_BLOCK, sigchld)
        try:
            if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC) or len(fds) > max_fds:
                raise OSError("request truncated (fds or bytes)")
            for i, fd in enumerate(fds):
                fd_array[i] = fd
            before_fork()
            pid = fork_job(plan, n, fd_array, len(fds))
            if pid == 0:
                _vivarium_zygote_payload(after_child, added)
            after_parent()
            if pid < 0:
                raise OSError(-pid, "fork of the job's init")
            pidfd = os.pidfd_open(pid)
            try:
                socket.send_fds(ctl, [b"ok"], [pidfd])
            finally:
                os.close(pidfd)
        except OSError as e:
            ctl.send(f"error: {e}".encode()[:200])
        finally:
            for fd in fds:
                os.close(fd)
            ctypes.memset(plan, 0, n)
            _signal.pthread_sigmask(_signal.SIG_UNBLOCK, sigchld)


def _vivarium_zygote_payload(after_child, added):
    # The job's payload: the library has forked the job's init, init has forked this
    # process, and every layer is in place.
    try:
        after_child()
        import _signal

        # (init gave SIGCHLD its default action and unblocked every signal; this tells
        # the interpreter, whose handler it was.)
        _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
        for var in added:
            os.environ.pop(var, None)
        # Generators seeded in the zygote would give every job the same numbers: the
        # `random` module reseeds itself after a fork, numpy's global one does not.
        np_random = sys.modules.get("numpy.random")
        if np_random is not None:
            np_random.seed()
        del added, np_random
        os.write(2, b"\0")
        _vivarium_run()
    except BaseException:
        pass
    os._exit(121)


_vivarium_zygote_main()
