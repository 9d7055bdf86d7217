

# Vivarium's zygote (appended to the warm bootstrap's functions above; see
# daemon/src/sandbox/zygote.rs). It runs in a sandbox of its own as uid 0 of that
# sandbox's user namespace, and never runs a job: it preloads, then for each request on
# its control socket (fd 3) forks a child that becomes one job's sandbox. The per-job
# setup is Rust, in the zygote library (fd 4), called with the GIL held.
def _vivarium_zygote_main():
    import ctypes, signal, socket

    lib = ctypes.PyDLL("/proc/self/fd/4")
    os.close(4)
    lib.vivarium_zygote_new_pid_ns.restype = ctypes.c_int
    lib.vivarium_zygote_job_prepare.argtypes = [
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_int),
        ctypes.c_size_t,
    ]
    lib.vivarium_zygote_job_prepare.restype = None
    lib.vivarium_zygote_job_init.argtypes = [ctypes.c_int]
    lib.vivarium_zygote_job_init.restype = None
    lib.vivarium_zygote_job_payload.restype = None

    _vivarium_preload()
    # The compiler's first use costs every job ~2 ms if it happens after the fork.
    compile("pass", "<vivarium>", "exec")
    # Every object so far moves to the collector's permanent generation: a collection in
    # a job then never walks (and so never copies, page by page) the zygote's heap.
    import gc

    gc.collect()
    gc.freeze()
    added = [v for v in os.environ.pop("VIVARIUM_ZYGOTE_ENV", "").split(",") if v]
    # fork copies only the calling thread: a preload that started threads (a BLAS pool,
    # say) would leave every job with a broken copy of it.
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        print(f"vivarium zygote: {threads} threads after the preloads; a zygote must have one", file=sys.stderr)
        os._exit(1)

    ctl = socket.socket(fileno=3)

    def reap(*_):
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    signal.signal(signal.SIGCHLD, reap)
    sys.stdout.flush()
    sys.stderr.flush()
    ctl.send(b"ready")
    while True:
        msg, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 16)
        if not msg:
            os._exit(0)  # the spawner is gone or retired us
        err = lib.vivarium_zygote_new_pid_ns()
        pid = os.fork() if err == 0 else -1
        if pid == 0:
            _vivarium_zygote_child(lib, ctl, msg, fds, added)
        for fd in fds:
            os.close(fd)
        if pid < 0:
            ctl.send(b"error: unshare(CLONE_NEWPID) failed with errno %d" % err)
            continue
        pidfd = os.pidfd_open(pid)
        socket.send_fds(ctl, [b"ok"], [pidfd])
        os.close(pidfd)


def _vivarium_zygote_child(lib, ctl, msg, fds, added):
    # The job's init (pid 1 of its own pid namespace) until the next fork.
    try:
        import signal

        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        ctl.close()
        array = (ctypes_int_array(len(fds)))(*fds)
        lib.vivarium_zygote_job_prepare(msg, len(msg), array, len(fds))
        pid = os.fork()
        if pid:
            lib.vivarium_zygote_job_init(pid)  # never returns
            os._exit(122)
        # The payload: every layer in place when this returns.
        lib.vivarium_zygote_job_payload()
        for var in added:
            os.environ.pop(var, None)
        os.write(2, b"\0")
        _vivarium_run()
    except BaseException:
        pass
    os._exit(121)


def ctypes_int_array(n):
    import ctypes

    return ctypes.c_int * n


_vivarium_zygote_main()
