# Vivarium's session sandbox (run as `python3 <profile flags> -c <stub> <part>... -- [preload...]`).
# It runs inside a sandbox that is already complete (namespaces, read-only root, Landlock,
# seccomp, cgroup) and serves cells for as long as the daemon keeps the link open: each
# cell runs in the same `__main__` globals, as in a notebook, and its end is reported.
#
# At start fd 0 is the control link (a SOCK_SEQPACKET socket), fd 1 and fd 2 are pipes to
# the daemon. Daemon -> sandbox, one datagram each, integers little endian:
#   b"C" + cell:u32 + code_len:u64 [+ files:u32 [+ request]], with the read end of the
#        cell's stdin pipe attached (SCM_RIGHTS), then b"D" + bytes datagrams adding up
#        to code_len; with `files`, that many input files (inputs.py) come first on the
#        stdin pipe, placed under /work before the cell runs; with a collection request
#        (outputs.rs, `parse_request`: caps, then NUL-ended patterns) after `files`:
#        after the cell, what the patterns match that is new or changed since the last
#        collection is written as a bundle (outputs.py) into a new memfd, sealed, and
#        sent with the result;
#   b"I" + cell:u32: interrupt that cell if it is the one running;
#   EOF: the session is over.
# Sandbox -> daemon: b"R" + json, one per cell (daemon/src/server/cell_link.rs), with the
# cell's bundle attached when it asked for its outputs.
#
# How a cell runs follows Pyodide's CodeRunner (src/py/_pyodide/_base.py) and IPython's
# `last_expr` interactivity: the last statement, if an expression and not ended by `;`,
# is evaluated on its own and its repr() is the cell's value.
#
# SIGINT: the reader thread sends it to the main thread only while a cell is current
# (under `lock`); an interrupt for a cell that has come but not yet started is kept
# and delivered as it starts. Once a cell has ended, the main thread installs a do-nothing handler
# before it clears "current", so an interrupt that races the cell's end runs that
# handler instead of raising into the reporting code; the user's handler is put back
# just before the next cell starts.
#
# In parts: the interpreter keeps the memory its compiler used at its peak, so the loop
# is compiled one part (~2 KB) at a time rather than as one 20 KB program, which cut an
# idle session's private memory by ~0.8 MiB. The first part, up to the first `#: part`
# line, is the `-c` stub; each later part is an argument of its own, compiled and run in
# order in one namespace (sandbox::plan::session_program splits this file); before them
# comes inputs.py's source, compiled at the first cell with files (INPUTS_PY), and
# outputs.py's, compiled at the first cell that asks for its outputs (OUTPUTS_PY). The
# last part runs the loop and never returns.
import sys


def _vivarium_parts(argv):
    end = argv.index("--")
    ns = {"__name__": "__vivarium_session__", "__builtins__": __builtins__,
          "PRELOAD": argv[end + 1:], "INPUTS_PY": argv[1], "OUTPUTS_PY": argv[2]}
    parts = argv[3:end]
    del argv[:]
    parts.reverse()
    while parts:
        exec(compile(parts.pop(), OWN_FILE, "exec", dont_inherit=True), ns)


OWN_FILE = "<vivarium session>"
_vivarium_parts(sys.argv)


#: part
import sys, os

# The profile's `warm.preload` modules, as in warm_bootstrap.py.
for name in PRELOAD:
    __import__(name)

# The C halves of ast, socket and json: what the loop uses of them, without the
# pure-Python modules' imports (enum, contextlib, re...), about 10 ms of start-up.
import _ast, _json, _queue, _signal, _socket, _thread, builtins, fcntl, io

# Not `signal` (its enums, ~1 MiB of an idle session's private memory: `_signal` has
# everything used here), nor `threading` (~1 MiB more: the reader thread is a
# `_thread` one), nor `traceback` until a cell first raises, nor `linecache` and
# `tokenize` (another ~1 MiB, with `re`, `enum` and `functools`): a cell's source is
# put in linecache's cache when something imports linecache (the hook below) and
# tokenize only reads a source with a coding declaration.
signal = _signal

# Warm-up: the first compile() initializes the AST types (see warm_bootstrap.py).
compile("pass", "<vivarium>", "exec")

# What user code may replace later (sys.stdout, signal.signal, os.dup2, ...) is
# taken now, so the loop keeps working whatever a cell does to those modules.
dup2, close = os.dup2, os.close
set_handler, get_handler = signal.signal, signal.getsignal
default_int_handler, SIGINT, pthread_kill = (
    signal.default_int_handler, signal.SIGINT, signal.pthread_kill)
open_, BaseException_, KeyboardInterrupt_ = io.open, BaseException, KeyboardInterrupt
def format_exception(*args):
    import traceback
    return traceback.format_exception(*args)

def format_exception_only(*args):
    import traceback
    return traceback.format_exception_only(*args)

encode_string = _json.encode_basestring
sys_ = sys
byteorder = sys.byteorder  # of the ints in SCM_RIGHTS
own_file = "<vivarium session>"  # (OWN_FILE of the stub)

CODE_CHUNK = 60 * 1024
VALUE_MAX = 16 * 1024
MESSAGE_MAX = 4 * 1024
TRACEBACK_MAX = 16 * 1024
TYPE_MAX = 512
RESULT_MAX = 60 * 1024 - 1  # the whole datagram, b"R" included
MAX_FDS = 8
CO_COROUTINE = 0x80


#: part
# The control link moves off fd 0 (to a high, close-on-exec fd) and fd 0 becomes
# /dev/null between cells.
try:
    ctl_fd = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 100)
except OSError:
    ctl_fd = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
sock = _socket.socket(fileno=ctl_fd)
os_open = os.open

def null_stdin():
    # Opened each time, not kept: a cell sees no fd of ours beyond fd 0-2 and the link.
    null = os_open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    try:
        dup2(null, 0)
    finally:
        close(null)

null_stdin()
stdin_encoding = getattr(sys.__stdin__, "encoding", None) or "utf-8"
stdin_errors = getattr(sys.__stdin__, "errors", None) or "strict"

def new_stdin():
    stream = open_(0, "r", encoding=stdin_encoding, errors=stdin_errors, closefd=False)
    sys_.stdin = sys_.__stdin__ = stream

new_stdin()

main = type(sys)("__main__")
main.__builtins__ = builtins
sys.modules["__main__"] = main
sys.argv = [""]
g = main.__dict__


#: part
cells = _queue.SimpleQueue()
lock = _thread.allocate_lock()
# current: the cell running; queued: the cell handed to the main thread, not yet
# started; early: an interrupt for the queued cell, delivered when it starts.
state = {"current": None, "queued": None, "early": None}
main_ident = _thread.get_ident()
sources = {}  # filename -> linecache entry, re-registered if a cell clears linecache
modules = sys.modules

class LinecacheHook:
    # A meta-path finder that finds nothing itself: when `linecache` is imported (by
    # traceback, inspect, pdb, a cell...), the other finders find it and the
    # module's code runs, then the cells' sources are added to its cache, so its
    # users see them from their first call, as if linecache had been there all along.
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "linecache":
            return None
        for finder in sys_.meta_path:
            if finder is LinecacheHook or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_and_register(module):
            exec_module(module)
            cache = getattr(module, "cache", None)
            if isinstance(cache, dict):
                for filename, entry in sources.items():
                    cache.setdefault(filename, entry)

        loader.exec_module = exec_and_register
        return spec

sys.meta_path.insert(0, LinecacheHook)

def linecache_cache():
    # linecache's cache if linecache is imported (and looks like itself), else None.
    cache = getattr(modules.get("linecache"), "cache", None)
    return cache if isinstance(cache, dict) else None

def decode_source(source):
    # As tokenize.detect_encoding: a coding declaration can only be in the first
    # two lines, so without the word there the source is UTF-8 (a BOM dropped).
    if b"coding" not in b"\n".join(source.split(b"\n", 2)[:2]):
        return source.decode("utf-8-sig")
    import tokenize
    return source.decode(tokenize.detect_encoding(io.BytesIO(source).readline)[0])


#: part
loop_box = []  # the asyncio loop of top-level `await`, made on first use

def close_fds(fds):
    for fd in fds:
        try:
            close(fd)
        except OSError:
            pass

def reader():
    pending = None  # [cell, stdin_fd, code_len, chunks, have]
    space = _socket.CMSG_SPACE(MAX_FDS * 4)
    while True:
        try:
            data, anc, flags, _addr = sock.recvmsg(CODE_CHUNK + 16, space)
        except OSError:
            os._exit(0)
        fds = []
        for level, kind, payload in anc:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                n = len(payload) - len(payload) % 4
                fds.extend(int.from_bytes(payload[i:i + 4], byteorder, signed=True)
                           for i in range(0, n, 4))
        if not data:
            os._exit(0)  # the daemon ended the session
        tag = data[:1]
        if flags & _socket.MSG_TRUNC:
            tag = b""  # longer than any datagram of the protocol
        if tag == b"C" and len(data) >= 13 and len(fds) == 1:
            if pending is not None:
                close_fds([pending[1]])
            code_len = int.from_bytes(data[5:13], "little")
            files = int.from_bytes(data[13:17], "little")
            outputs = outputs_request(data[17:]) if len(data) > 17 else None
            pending = [int.from_bytes(data[1:5], "little"), fds[0], code_len, [], 0, files,
                       outputs]
        elif tag == b"D" and pending is not None and len(data) > 1:
            pending[3].append(data[1:])
            pending[4] += len(data) - 1
            close_fds(fds)
            if pending[4] > pending[2]:
                close_fds([pending[1]])
                pending = None
        elif tag == b"I" and len(data) == 5:
            close_fds(fds)
            cell = int.from_bytes(data[1:5], "little")
            with lock:
                if state["current"] == cell:
                    pthread_kill(main_ident, SIGINT)
                elif state["queued"] == cell:
                    state["early"] = cell
            continue
        else:
            close_fds(fds)
            continue
        if pending is not None and pending[4] == pending[2]:
            with lock:
                state["queued"], state["early"] = pending[0], None
            cells.put((pending[0], pending[1], b"".join(pending[3]), pending[5], pending[6]))
            pending = None


def outputs_request(b):
    # (caps, patterns) of a collection request, or None (then the result says nothing).
    try:
        count = int.from_bytes(b[20:24], "little")
        patterns = [p.decode("utf-8") for p in b[24:].split(b"\0")[:-1]]
        if len(b) < 24 or len(patterns) != count or not patterns or b[-1:] != b"\0":
            return None
        caps = (int.from_bytes(b[0:4], "little"), int.from_bytes(b[4:12], "little"),
                int.from_bytes(b[12:20], "little"))
        return (caps, patterns)
    except ValueError:
        return None


#: part
def clip_head(text, limit):
    raw = text.encode("utf-8", "backslashreplace")
    if len(raw) <= limit:
        return raw.decode("utf-8"), False
    return raw[:limit].decode("utf-8", "ignore"), True

def clip_middle(text, limit):
    raw = text.encode("utf-8", "backslashreplace")
    if len(raw) <= limit:
        return raw.decode("utf-8"), False
    marker = ("\n[... %d bytes of traceback omitted ...]\n" % (len(raw) - limit)).encode()
    keep = max(limit - len(marker), 0)
    head, tail = raw[:keep // 2], raw[len(raw) - (keep - keep // 2):]
    # Cut at line ends where there are any, so the marker is a line of its own.
    if b"\n" in head:
        head = head[:head.rindex(b"\n")]
    if b"\n" in tail:
        tail = tail[tail.index(b"\n") + 1:]
    return (head + marker + tail).decode("utf-8", "ignore"), True

def quiet():
    # Make SIGINT harmless; returns the handler it replaced. signal.signal() runs
    # the handlers of signals already pending first, so it may raise a late
    # KeyboardInterrupt: then try again (it is harmless from the second try on).
    while True:
        try:
            previous = get_handler(SIGINT)
            set_handler(SIGINT, noop)
            return previous
        except BaseException_:
            pass

def noop(signum, frame):
    pass

def source_lines(text):
    # Lines as the parser counts them (str.splitlines would also split at \f,
    # \x1c, \u2028 and more, inside strings too).
    return io.StringIO(text, newline=None).readlines()

def register(filename, text, lines):
    lines = list(lines)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    # mtime None: linecache.checkcache keeps the entry (there is no file to check).
    entry = (len(text), None, lines, filename)
    sources[filename] = entry
    cache = linecache_cache()
    if cache is not None:
        cache[filename] = entry


#: part
def quiet_end(lines, last):
    # Whether `;` is the first thing after the last statement (an expression, its
    # parentheses included): only blanks, line continuations, comments and `;` can
    # follow the last statement of a source that parsed.
    rest = lines[last.end_lineno - 1].encode("utf-8")[last.end_col_offset:]
    rest = rest.decode("utf-8", "replace") + "".join(lines[last.end_lineno:])
    i, n = 0, len(rest)
    while i < n:
        c = rest[i]
        if c == ";":
            return True
        if c == "#":
            end = rest.find("\n", i)
            i = n if end < 0 else end + 1
        elif c in " \t\f\r\n\\":
            i += 1
        else:
            return False
    return False

def quiet_end_of(lines, last):
    try:
        return quiet_end(lines, last)
    except Exception:
        return False  # (offsets that do not match the lines: show the value)

def run_code(code):
    result = eval(code, g)
    if code.co_flags & CO_COROUTINE:
        if not loop_box:
            import asyncio
            loop_box.append(asyncio.new_event_loop())
        loop = loop_box[0]
        task = loop.create_task(result)
        try:
            result = loop.run_until_complete(task)
        finally:
            if not task.done():
                task.cancel()
    return result

def compile_cell(cell, source):
    # Parse and compile; an error here is the cell's syntax error (no frames).
    filename = "<cell %d>" % cell
    text = decode_source(source)
    lines = source_lines(text)
    register(filename, text, lines)
    flags = _ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(text, filename, "exec", _ast.PyCF_ONLY_AST | flags, dont_inherit=True)
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr) and not quiet_end_of(lines, tree.body[-1]):
        last = compile(_ast.Expression(tree.body.pop().value), filename, "eval", flags,
                       dont_inherit=True)
    body = compile(tree, filename, "exec", flags, dont_inherit=True)
    return body, last

def execute(body, last):
    run_code(body)
    if last is None:
        return None
    value = run_code(last)
    if value is None:
        return None
    g["_"] = value
    return repr(value)


#: part
def exception_fields(exc, compiling):
    cls = type(exc)
    try:
        module, qualname = cls.__module__, cls.__qualname__
        name = qualname if module == "builtins" else "%s.%s" % (module, qualname)
        name = str(name)
    except BaseException_:
        name = "<unknown>"
    try:
        message = str(exc)
    except BaseException_:
        message = "<exception str() failed>"
    tb = exc.__traceback__
    if compiling:
        tb = None
    else:
        # Start in the cell's code: drop the bootstrap's (and asyncio's) frames.
        first = tb
        while first is not None and not first.tb_frame.f_code.co_filename.startswith("<cell "):
            first = first.tb_next
        if first is None:
            while tb is not None and tb.tb_frame.f_code.co_filename == own_file:
                tb = tb.tb_next
        else:
            tb = first
    import linecache  # (traceback imports it anyway)
    cache = linecache_cache()
    for filename, entry in sources.items():
        if cache is not None:
            cache.setdefault(filename, entry)
    try:
        exc.__traceback__ = tb
    except BaseException_:
        pass
    sys_.last_type, sys_.last_value, sys_.last_traceback = cls, exc, tb
    try:
        if compiling:
            text = "".join(format_exception_only(cls, exc))
        else:
            text = "".join(format_exception(cls, exc, tb))
    except BaseException_:
        text = "%s: %s\n" % (name, message)
    return name, message, text


#: part
def to_json(result):
    # The result's JSON: its values are str, bool, int or None (json.dumps would
    # import re and more; _json.encode_basestring is json's own string encoder).
    items = []
    for key, v in result.items():
        if v is None:
            v = "null"
        elif v is True or v is False:
            v = "true" if v else "false"
        elif isinstance(v, int):
            v = str(v)
        else:
            v = encode_string(v)
        items.append(encode_string(key) + ":" + v)
    return "{" + ",".join(items) + "}"

def encode(cell, value, exc):
    # The result datagram, its fields cut until it fits in RESULT_MAX.
    if exc is not None:
        name, message, text = exc
    scale = 1
    while True:
        result = {"cell": cell, "status": "ok", "value": None, "value_truncated": False,
                  "exc_type": None, "exc_message": None, "traceback": None,
                  "traceback_truncated": False}
        if value is not None:
            result["value"], result["value_truncated"] = clip_head(value, VALUE_MAX // scale)
        if exc is not None:
            result["status"] = "exception"
            result["exc_type"] = clip_head(name, TYPE_MAX // scale)[0]
            result["exc_message"] = clip_head(message, MESSAGE_MAX // scale)[0]
            result["traceback"], result["traceback_truncated"] = clip_middle(
                text, TRACEBACK_MAX // scale)
        data = b"R" + to_json(result).encode("utf-8")
        if len(data) <= RESULT_MAX or scale >= 1024:
            return data
        scale *= 2

def flush_all():
    for stream in (sys_.stdout, sys_.stderr, sys_.__stdout__, sys_.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except BaseException_:
            pass


#: part
def read_from(fd):
    def read(n):
        parts = []
        while n:
            chunk = os.read(fd, n)
            if not chunk:
                raise OSError(32, "the input files were cut short")
            parts.append(chunk)
            n -= len(chunk)
        return b"".join(parts)
    return read


def serve(cell, stdin_fd, source, files, box):
    # Runs the cell; box[0] gets ("value", repr or None) or ("exc", exc, compiling).
    try:
        try:
            if files:
                # Before the cell is current (an interrupt waits), replacing what an
                # earlier cell left at a path if it is a regular file.
                try:
                    if "_vivarium_inputs" not in globals():
                        exec(compile(INPUTS_PY, own_file, "exec", dont_inherit=True), globals())
                    error = _vivarium_inputs(read_from(stdin_fd), files, True)
                except BaseException_ as e:  # the stream, or a cell's signal handler
                    error = "the input files could not be placed: %s" % (
                        getattr(e, "strerror", None) or type(e).__name__)
                if error is not None:
                    close(stdin_fd)
                    box[0] = ("input", error)
                    return
            dup2(stdin_fd, 0)
            close(stdin_fd)
            new_stdin()
            with lock:
                state["current"] = cell
                if state["queued"] == cell:
                    state["queued"] = None
                    if state["early"] == cell:
                        state["early"] = None
                        pthread_kill(main_ident, SIGINT)  # raised in a moment
            box[0] = ("compile",)
            body, last = compile_cell(cell, source)
            box[0] = ("run",)
            box[0] = ("value", execute(body, last))
        except BaseException_ as e:
            box[0] = ("exc", e, box[0] is not None and box[0][0] == "compile")
    except KeyboardInterrupt_ as e:  # a second interrupt, inside the handler above
        if box[0] is None or box[0][0] not in ("value", "exc"):
            box[0] = ("exc", e, False)
    finally:
        box.append(quiet())
        with lock:
            state["current"] = None


#: part
outputs_seen = {}  # path -> identity of what earlier cells' collections listed

def collect_outputs(spec):
    # After a cell: its outputs as a bundle in a new memfd, sealed (nothing can change it
    # once the daemon has it), sent with the cell's result; None if it could not be made.
    # Made only now, so no fd of the daemon's is open while the cell runs.
    caps, patterns = spec
    try:
        try:  # MFD_NOEXEC_SEAL (Linux 6.3; vm.memfd_noexec = 2 asks for it)
            fd = os.memfd_create("vivarium-outputs", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | 8)
        except OSError:
            fd = os.memfd_create("vivarium-outputs", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except BaseException_:
        return None
    try:
        if "_vivarium_outputs_collect" not in globals():
            exec(compile(OUTPUTS_PY, own_file, "exec", dont_inherit=True), globals())
        _vivarium_outputs_collect(fd, patterns, caps[0], caps[1], caps[2],
                                  seen=outputs_seen)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
                    | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL)
        return fd
    except BaseException_:
        close_fds([fd])
        return None


#: part
_thread.start_new_thread(reader, ())
user_handler = quiet()
os.write(2, b"\0")  # ready: the daemon reads this byte before anything else

while True:
    cell, stdin_fd, source, files, outputs = cells.get()
    try:
        set_handler(SIGINT, user_handler if user_handler is not None else default_int_handler)
    except BaseException_:
        pass
    box = [None]
    try:
        serve(cell, stdin_fd, source, files, box)
    except KeyboardInterrupt_ as e:  # landed before serve() could store it
        if box[0] is None or box[0][0] not in ("value", "exc"):
            box[0] = ("exc", e, False)
    user_handler = box[1] if len(box) > 1 else quiet()
    with lock:
        state["current"] = None  # (serve() does it, unless interrupted before)
    outcome = box[0]
    # The cell's figures still open: saved (out/figure-N.png) and closed, as
    # matplotlib-inline does after each cell (figures.py).
    figures = sys_.modules.get("vivarium_figures")
    if figures is not None:
        try:
            figures.flush_figures()
        except BaseException_:
            pass
    flush_all()
    try:
        null_stdin()
    except OSError:
        pass
    try:
        new_stdin()
    except BaseException_:
        pass
    bundle = collect_outputs(outputs) if outputs is not None else None
    value, exc = None, None
    if outcome is not None and outcome[0] == "value":
        value = outcome[1]
    elif outcome is not None and outcome[0] == "input":
        # Nothing of the cell ran.
        exc = ("vivarium.InputFileError", outcome[1],
               "vivarium.InputFileError: %s (the cell did not run)\n" % outcome[1])
    elif outcome is not None and outcome[0] == "exc":
        exc = exception_fields(outcome[1], outcome[2])
    else:
        exc = ("SystemError", "the cell ended without a result", "")
    try:
        if bundle is None:
            sock.send(encode(cell, value, exc))
        else:
            sock.sendmsg([encode(cell, value, exc)], [(
                _socket.SOL_SOCKET, _socket.SCM_RIGHTS, bundle.to_bytes(4, byteorder, signed=True))])
            close_fds([bundle])
    except OSError:
        os._exit(0)  # the daemon is gone
