# Output files ("artifacts"), as a session's cell loop collects them after a cell: the
# files under /work that the patterns match, as the job's own process (its user, its
# Landlock domain), never through a link, written as a bundle to a file descriptor. The
# same walker as sandbox/src/outputs.rs (a cold job's init), which defines the pattern
# language, the walk and the bundle format; the two write byte-identical bundles for the
# same tree (tested there). The daemon re-checks everything (server/artifacts.rs).
#
# Patterns (checked by the daemon before they get here): `/`-separated, relative to
# /work; a component that is exactly `**` matches zero or more whole components; in any
# other component `*` matches any run of characters (none included), `?` one character,
# anything else itself (no escapes, no [classes], no {braces}); `*` and `?` match a
# leading `.`. A character is one of the name's UTF-8 decoded with surrogateescape (an
# invalid byte is one character). Only regular files are collected: a pattern matching a
# directory collects nothing, `out/**` everything below out. No patterns: ["out/**"].
#
# The bundle, integers little endian: b"VIVOUT1\n", then records tag:u8 path_len:u32
# path size:u64, with `size` bytes after a FILE (1) and errno:u32 after an UNREADABLE (9);
# other tags SYMLINK 2, FIFO 3, SOCKET 4, CHAR_DEVICE 5, BLOCK_DEVICE 6, TOO_LARGE 7,
# OVER_TOTAL 8, CHANGED 10; then END: 0xFF omitted:u64 flags:u32 (bit 0 walk limit,
# bit 1 depth or path-length limit).
#
# Uses `os` only (imported by the bootstrap, as inputs.py does), and no other module.

# MAX_DEPTH, MAX_VISITS, MAX_SKIPPED, MAX_PATH: as outputs.rs (a test checks this line).
_vivarium_outputs_limits = (32, 100000, 10000, 4096)


def _vivarium_outputs_component(pattern, name):
    # One component: `*` any run, `?` one character (the same algorithm as outputs.rs).
    pi = ni = 0
    back = None
    while ni < len(name):
        if pi < len(pattern) and (pattern[pi] == "?" or pattern[pi] == name[ni]):
            pi += 1
            ni += 1
        elif pi < len(pattern) and pattern[pi] == "*":
            back = (pi, ni)
            pi += 1
        elif back is not None:
            pi = back[0] + 1
            ni = back[1] + 1
            back = (back[0], back[1] + 1)
        else:
            return False
    return all(c == "*" for c in pattern[pi:])


def _vivarium_outputs_states(pattern, path):
    # The states (components matched) of `pattern` (a list) after `path` (bytes).
    def close(s):
        for i in range(len(pattern)):
            if s[i] and pattern[i] == "**":
                s[i + 1] = True

    now = [False] * (len(pattern) + 1)
    now[0] = True
    close(now)
    if not path:
        return now
    for name in path.split(b"/"):
        name = name.decode("utf-8", "surrogateescape")
        nxt = [False] * (len(pattern) + 1)
        for i in range(len(pattern)):
            if now[i]:
                if pattern[i] == "**":
                    nxt[i] = True
                elif _vivarium_outputs_component(pattern[i], name):
                    nxt[i + 1] = True
        close(nxt)
        if True not in nxt:
            return nxt
        now = nxt
    return now


def _vivarium_outputs_matches(pattern, path):
    # Whether the pattern (str) matches the path (bytes, relative to /work).
    if not path:
        return False
    pattern = pattern.split("/")
    return _vivarium_outputs_states(pattern, path)[len(pattern)]


def _vivarium_outputs_below(pattern, path):
    # Whether the pattern could match something below the directory `path` (b"": /work).
    pattern = pattern.split("/")
    return True in _vivarium_outputs_states(pattern, path)[: len(pattern)]


def _vivarium_outputs_collect(out_fd, patterns, max_files, max_file_bytes,
                              max_total_bytes, work="/work", seen=None):
    # Write the bundle of what `patterns` (none: out/**) match under `work` to `out_fd`.
    # Returns (files, file_bytes, skipped, omitted, flags). An entry's failure is a
    # record; a failure to open or read `work` itself, or to write, raises OSError.
    # With `seen` (a session's: path -> identity), an entry whose identity (device,
    # inode, size, mtime, ctime, type, from its lstat) is the one an earlier collection
    # listed is left out, and what this one lists is put there.
    patterns = list(patterns) or ["out/**"]
    w = {
        "patterns": patterns, "caps": (max_files, max_file_bytes, max_total_bytes),
        "buf": bytearray(b"VIVOUT1\n"), "fd": out_fd, "files": 0, "bytes": 0,
        "skipped": 0, "omitted": 0, "flags": 0, "visits": 0, "seen": seen,
    }
    dir_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    root = os.open(work, dir_flags)
    try:
        names = _vivarium_outputs_list(w, root)
        if names is not None:
            _vivarium_outputs_entries(w, root, names, b"", 0)
    finally:
        os.close(root)
    w["buf"] += b"\xff" + w["omitted"].to_bytes(8, "little") + w["flags"].to_bytes(4, "little")
    _vivarium_outputs_flush(w)
    return (w["files"], w["bytes"], w["skipped"], w["omitted"], w["flags"])


def _vivarium_outputs_flush(w):
    _vivarium_outputs_write(w["fd"], w["buf"])
    del w["buf"][:]


def _vivarium_outputs_write(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _vivarium_outputs_list(w, fd):
    # A directory's names (bytes), sorted; None when the visit limit stops the walk.
    names = []
    with os.scandir(fd) as it:
        for entry in it:
            w["visits"] += 1
            if w["visits"] > _vivarium_outputs_limits[1]:
                w["flags"] |= 1
                return None
            names.append(os.fsencode(entry.name))
    names.sort()
    return names


def _vivarium_outputs_entries(w, fd, names, prefix, depth):
    # The entries of the directory `fd` (at `prefix`); False when the walk stops.
    for name in names:
        path = prefix + b"/" + name if prefix else name
        matches = any(_vivarium_outputs_matches(p, path) for p in w["patterns"])
        below = any(_vivarium_outputs_below(p, path) for p in w["patterns"])
        if not matches and not below:
            continue
        if len(path) > _vivarium_outputs_limits[3]:
            w["flags"] |= 2
            continue
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError as e:
            _vivarium_outputs_skip(w, 9, path, 0, e.errno)
            continue
        kind = st.st_mode & 0o170000
        if kind == 0o040000:
            if below and not _vivarium_outputs_enter(w, fd, name, path, depth + 1, st):
                return False
            continue
        if not matches:
            continue
        seen = w["seen"]
        if seen is not None:
            ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, kind)
            if seen.get(path) == ident:
                continue
            seen[path] = ident
        if kind == 0o100000:
            if not _vivarium_outputs_file(w, fd, name, path, st) and seen is not None:
                del seen[path]  # omitted: a later collection may return it
            continue
        tag = {0o120000: 2, 0o010000: 3, 0o140000: 4, 0o020000: 5, 0o060000: 6}.get(kind, 9)
        if not _vivarium_outputs_skip(w, tag, path, st.st_size, 22 if tag == 9 else None) \
                and seen is not None:
            del seen[path]
    return True


def _vivarium_outputs_enter(w, fd, name, path, depth, st):
    if depth >= _vivarium_outputs_limits[0]:
        w["flags"] |= 2
        return True
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        sub = os.open(name, flags, dir_fd=fd)
    except OSError as e:
        _vivarium_outputs_skip(w, 9, path, st.st_size, e.errno)
        return True
    try:
        try:
            now = os.fstat(sub)
        except OSError as e:
            _vivarium_outputs_skip(w, 9, path, st.st_size, e.errno)
            return True
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            _vivarium_outputs_skip(w, 10, path, st.st_size, None)
            return True
        try:
            names = _vivarium_outputs_list(w, sub)
        except OSError as e:
            _vivarium_outputs_skip(w, 9, path, st.st_size, e.errno)
            return True
        if names is None:
            return False
        return _vivarium_outputs_entries(w, sub, names, path, depth)
    finally:
        os.close(sub)


def _vivarium_outputs_file(w, fd, name, path, st):
    # False when the file was omitted (past max_files); else it was listed.
    max_files, max_file_bytes, max_total_bytes = w["caps"]
    if w["files"] >= max_files:
        w["omitted"] += 1
        return False
    size = st.st_size
    if size > max_file_bytes:
        return _vivarium_outputs_skip(w, 7, path, size, None)
    room = max(max_total_bytes - w["bytes"], 0)
    if size > room:
        return _vivarium_outputs_skip(w, 8, path, size, None)
    allowance = min(max_file_bytes, room)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        f = os.open(name, flags, dir_fd=fd)
    except OSError as e:
        return _vivarium_outputs_skip(w, 9, path, size, e.errno)
    try:
        try:
            now = os.fstat(f)
        except OSError as e:
            return _vivarium_outputs_skip(w, 9, path, size, e.errno)
        if (now.st_mode & 0o170000) != 0o100000 or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return _vivarium_outputs_skip(w, 10, path, size, None)
        chunks = []
        read = 0
        limit = allowance + 1
        try:
            while read < limit:
                chunk = os.read(f, min(limit - read, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                read += len(chunk)
        except OSError as e:
            return _vivarium_outputs_skip(w, 9, path, size, e.errno)
    finally:
        os.close(f)
    if read > allowance:
        return _vivarium_outputs_skip(w, 7 if read > max_file_bytes else 8, path, read, None)
    _vivarium_outputs_header(w, 1, path, read)
    _vivarium_outputs_flush(w)
    for chunk in chunks:  # written as they are, not copied into the buffer
        _vivarium_outputs_write(w["fd"], chunk)
    w["files"] += 1
    w["bytes"] += read
    return True


def _vivarium_outputs_skip(w, tag, path, size, errno):
    # A record other than FILE, or an omitted entry past MAX_SKIPPED (False).
    if w["skipped"] >= _vivarium_outputs_limits[2]:
        w["omitted"] += 1
        return False
    _vivarium_outputs_header(w, tag, path, size)
    if tag == 9:
        w["buf"] += (errno or 5).to_bytes(4, "little")
    w["skipped"] += 1
    if len(w["buf"]) >= 1 << 16:
        _vivarium_outputs_flush(w)
    return True


def _vivarium_outputs_header(w, tag, path, size):
    w["buf"] += bytes((tag,)) + len(path).to_bytes(4, "little") + path + size.to_bytes(8, "little")
