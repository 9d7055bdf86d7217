# A cold job's program (`python3 <flags> -c <this> /work/main.py <args>`): the figures
# hook (figures_hook.py, before this), then /work/main.py run as `python3 <flags>
# /work/main.py <args>` would run it, as the warm bootstrap does, with the interpreter's
# own exit.
def _vivarium_cold():
    del sys.argv[0]
    path = sys.argv[0]
    main = type(sys)("__main__")
    main.__file__ = path
    main.__cached__ = None
    sys.modules["__main__"] = main
    with open(path, "rb") as f:
        code = f.read()
    try:
        exec(compile(code, path, "exec"), main.__dict__)
    except SystemExit:
        raise
    except BaseException as e:
        # Start the traceback in the job's code, as for a script run directly.
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        raise SystemExit(1)
_vivarium_cold()
