# Vivarium's warm sandbox, from its bootstrap compiled ahead (run with `python3 <profile
# flags> -c <this> [preload...]`). The daemon compiled the warm bootstrap (plan.rs,
# WARM_BOOTSTRAP) once with this same interpreter, outside any sandbox and from its own
# source only (daemon/src/server/warm_code.rs), and wrote it first on this sandbox's
# stdin: u32 length (little endian), then the interpreter's magic number and the
# marshalled code. It runs here as the `-c` program would have; what is saved is the
# compiler's work, and the memory its peak leaves in the interpreter's heap (~0.4 MiB
# per idle sandbox). A code object from another interpreter version is refused: the
# sandbox then fails before it is ready, and the daemon builds the next one from source.
import sys, os, marshal


def _vivarium_exact(n):
    parts = []
    while n:
        chunk = os.read(0, n)
        if not chunk:
            os._exit(0)  # the daemon closed the sandbox
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


_vivarium_code = _vivarium_exact(int.from_bytes(_vivarium_exact(4), "little"))
if _vivarium_code[:4] != sys.modules["_frozen_importlib_external"].MAGIC_NUMBER:
    os.write(2, b"vivarium: the compiled warm bootstrap is for another Python version\n")
    os._exit(1)
_vivarium_code = marshal.loads(memoryview(_vivarium_code)[4:])
del _vivarium_exact
exec(_vivarium_code)
