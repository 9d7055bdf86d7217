# Shared prelude of the escape probes (tests/attack). The runner sends this file followed
# by one probe as the job's code, so every probe has these helpers and `ARGS`.
#
# Contract: a probe attempts ONE technique and ends with exactly one call of `blocked`,
# `escaped` or `unclear`, which print one JSON line and exit 0:
#   {"probe": NAME, "verdict": "BLOCKED" | "ESCAPED" | "INCONCLUSIVE", "evidence": "...",
#    "zygote": whether the sandbox was forked from a zygote}
# BLOCKED and ESCAPED each need positive evidence (an errno seen, a canary unchanged, a
# secret absent from what was read). Anything else is INCONCLUSIVE, which the runner
# counts as a failure, like a probe that crashes or prints nothing.
import ctypes, errno, hashlib, json, os, re, sys

ARGS = json.loads(sys.argv[1])
PROBE = ARGS["probe"]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SECRET_RE = re.compile(rb"VIVSECRET-[0-9a-f]{32}")


def ename(e):
    return errno.errorcode.get(e, str(e))


# Whether this job's sandbox was forked from a zygote (its interpreter was started with
# the zygote's `-c` program): the runner checks it against the profile, so a zygote run
# that silently fell back to cold starts fails.
FORKED = any(a.startswith("_vivarium_zygote") for a in sys.orig_argv)


def _emit(verdict, evidence):
    print(json.dumps({"probe": PROBE, "verdict": verdict, "evidence": str(evidence),
                      "zygote": FORKED}), flush=True)
    os._exit(0)


def blocked(evidence):
    _emit("BLOCKED", evidence)


def escaped(evidence):
    _emit("ESCAPED", evidence)


def unclear(evidence):
    _emit("INCONCLUSIVE", evidence)


def syscall(nr, *args):
    """Raw syscall: (return value, None) or (-1, errno name)."""
    ctypes.set_errno(0)
    ret = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a
                                            for a in args])
    if ret == -1:
        return ret, ename(ctypes.get_errno())
    return ret, None


def attempt(fn):
    """fn() -> ("ok", value) or ("err", errno name)."""
    try:
        return "ok", fn()
    except OSError as e:
        return "err", ename(e.errno)


def has_secret(data):
    """Whether bytes hold the run's secret (compared by hash: the probe never knows it)."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    return any(hashlib.sha256(m).hexdigest() == ARGS["secret_sha256"]
               for m in SECRET_RE.findall(data))


def decide_errno(what, err, blocking, reached):
    """One syscall's verdict: `blocking` errnos are the sandbox's answer, `reached` ones
    (or success, err None) prove the kernel implementation ran."""
    if err in blocking:
        blocked(f"{what}: {err}")
    if err is None or err in reached:
        escaped(f"{what}: {'succeeded' if err is None else err}")
    unclear(f"{what}: unexpected {err}")


def in_child(fn):
    """Run fn() in a forked child (for attempts that change the caller); returns the
    child's wait status and the first line it wrote to a pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = str(fn())
        except BaseException as e:  # report anything, never fall through into the parent
            out = f"exception {type(e).__name__}: {e}"
        os.write(w, out.encode()[:4000] + b"\n")
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        line = f.readline().decode().strip()
    _, status = os.waitpid(pid, 0)
    return status, line
