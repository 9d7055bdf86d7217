# Writes that must fail (read-only system paths) and writes that must work (scratch space).
import errno, json, os

def attempt(fn):
    try:
        return {"ok": fn()}
    except OSError as e:
        return {"errno": errno.errorcode.get(e.errno, str(e.errno))}

def append(path, data=b"#vivarium-e2e-was-here\n"):
    def go():
        with open(path, "ab") as f:
            f.write(data)
        return "written"
    return go

def create(path):
    def go():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.close(fd)
        return "created"
    return go

def round_trip(path):
    def go():
        data = os.urandom(4096)
        with open(path, "wb") as f:
            f.write(data)
        with open(path, "rb") as f:
            return f.read() == data
    return go

def overwrite(path, data):
    def go():
        with open(path, "w") as f:
            f.write(data)
        return "written"
    return go

def run_from(directory):
    def go():
        import subprocess
        path = os.path.join(directory, "x.sh")
        with open(path, "w") as f:
            f.write("#!/bin/sh\necho ran\n")
        os.chmod(path, 0o755)
        return subprocess.run([path], capture_output=True, text=True).stdout
    return go

print(json.dumps({
    "blocked": {
        "/usr/lib/python3.11/os.py": attempt(append("/usr/lib/python3.11/os.py")),
        "/etc/passwd": attempt(append("/etc/passwd")),
        "/new-file": attempt(create("/new-file")),
        "/usr/new-file": attempt(create("/usr/new-file")),
        "/proc/sys/kernel/hostname": attempt(overwrite("/proc/sys/kernel/hostname", "pwned")),
        "mkdir /etc/x": attempt(lambda: os.mkdir("/etc/x")),
    },
    # Writable by unix permissions (the payload owns it), so only Landlock stops it.
    "landlock": {
        "/proc/self/comm": attempt(overwrite("/proc/self/comm", "pwned")),
    },
    "allowed": {
        "/work": attempt(round_trip("/work/probe.bin")),
        "/tmp": attempt(round_trip("/tmp/probe.bin")),
        "/dev/shm": attempt(round_trip("/dev/shm/probe.bin")),
        "mkdir /tmp/d": attempt(lambda: os.mkdir("/tmp/d") or os.path.isdir("/tmp/d")),
    },
    # The scratch mounts are noexec: a dropped binary or script cannot be run.
    "exec": {d: attempt(run_from(d)) for d in ("/work", "/tmp", "/dev/shm")},
    "devices": {
        "null_write": attempt(lambda: open("/dev/null", "wb").write(b"x" * 100)),
        "null_read": attempt(lambda: open("/dev/null", "rb").read().hex()),
        "zero_read": attempt(lambda: open("/dev/zero", "rb").read(8).hex()),
        "urandom_len": attempt(lambda: len(open("/dev/urandom", "rb").read(16))),
        "full_write": attempt(lambda: open("/dev/full", "wb", buffering=0).write(b"x")),
    },
}))
