

# Vivarium's zygote (appended to the warm bootstrap's functions above; see
# sandbox/src/zygote.rs). It runs in a sandbox of its own as uid 0 of that
# sandbox's user namespace, and never runs a job: it preloads, then for each request on
# its control socket (fd 3) forks a child that becomes one job's sandbox. The request
# loop and the per-job setup are Rust, in the zygote library (fd 4), called once with
# the GIL held: it returns only when the spawner hangs up, and in each job's payload.
def _vivarium_zygote_main():
    import ctypes, socket, _signal

    lib = ctypes.PyDLL("/proc/self/fd/4")
    os.close(4)
    serve = lib.vivarium_zygote_serve
    serve.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t] + [ctypes.c_void_p] * 3
    serve.restype = ctypes.c_int
    # What os.fork does around its fork(), for the forks the library makes: the import
    # lock and the before-fork hooks, the parent's after-fork hooks, and in the job's
    # payload (the one copy that runs Python again) the interpreter's own after-fork
    # repairs and the child hooks (`random` reseeds itself there), which the library
    # calls once the job has come, before it returns.
    api = ctypes.pythonapi
    hooks = [
        ctypes.cast(f, ctypes.c_void_p)
        for f in (api.PyOS_BeforeFork, api.PyOS_AfterFork_Parent, api.PyOS_AfterFork_Child)
    ]

    # Keep numeric libraries single-threaded while they load: a fork copies only the
    # calling thread (checked below). Set here, in os.environ (putenv: the libraries'
    # getenv sees it), not in the exec-time environment, whose block every forked job's
    # /proc/self/environ would show; removed again (unsetenv) once the preloads are
    # done, before any job, so that no job sees them and none has to remove them.
    added = [v for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS") if v not in os.environ]
    for var in added:
        os.environ[var] = "1"
    _vivarium_preload()
    for var in added:
        del os.environ[var]
    del added
    # The compiler's first use costs every job ~2 ms if it happens after the fork.
    compile("pass", "<vivarium>", "exec")
    # fork copies only the calling thread: a preload that started threads (a BLAS pool,
    # say) would leave every job with a broken copy of it.
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        print(f"vivarium zygote: {threads} threads after the preloads; a zygote must have one", file=sys.stderr)
        os._exit(1)

    ctl = socket.socket(fileno=3)
    # The library reaps the job's inits (through their pidfds): SIGCHLD keeps its
    # default action, which the jobs inherit.
    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
    # One buffer for every request, cleared after each: no job's plan stays in the
    # zygote's memory for the next job to inherit.
    buf = bytearray(1 << 20)
    plan = (ctypes.c_char * len(buf)).from_buffer(buf)
    # Every object so far moves to the collector's permanent generation: a collection in
    # a job then never walks (and so never copies, page by page) the zygote's heap.
    import gc

    gc.collect()
    gc.freeze()
    sys.stdout.flush()
    sys.stderr.flush()
    ctl.send(b"ready")
    served = serve(3, plan, len(buf), *hooks)
    if served == 1:
        _vivarium_zygote_payload()
    if served < 0:
        print(f"vivarium zygote: request loop failed: {os.strerror(-served)}", file=sys.stderr)
        os._exit(1)
    os._exit(0)  # the spawner is gone or retired us


def _vivarium_zygote_payload():
    # The job's payload: the library has forked the job's init, init has forked this
    # process, every layer is in place, the daemon has been told so, the job has come on
    # stdin, and the library has run the interpreter's after-fork repairs (zygote.rs,
    # ready_then_wait_for_job and `serve`).
    try:
        # Generators seeded in the zygote would give every job the same numbers: the
        # `random` module reseeds itself after a fork, numpy's global one does not.
        np_random = sys.modules.get("numpy.random")
        if np_random is not None:
            np_random.seed()
        del np_random
        _vivarium_run()
    except BaseException:
        pass
    os._exit(121)


_vivarium_zygote_main()
