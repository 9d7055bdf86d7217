# The install driver: runs inside the install sandbox as /work/main.py (see
# daemon/src/packages/install.rs), by the profile's interpreter with -I. argv[1] is a
# JSON object from the daemon. uv's diagnostics go to stderr (read by the daemon); the
# last stdout line is the result, or what failed.
#
# No code of any package runs here, by construction (docs/ARCHITECTURE.md, "No package
# code at install time"):
# - uv only unpacks wheels (--only-binary :all:: no source build; no --compile-bytecode,
#   which would start the new environment's interpreter, and `site` in it processes
#   every .pth file that a wheel ships);
# - the resolved set is read from the .dist-info directories as data, not by
#   `uv pip freeze` (which queries the environment's interpreter, `site` included);
# - bytecode is compiled by the base interpreter with -I -S: no `site`, so no .pth and
#   no sitecustomize, and sys.path is the standard library alone; compileall parses and
#   compiles, it imports nothing it compiles.
import json
import os
import subprocess
import sys

cfg = json.loads(sys.argv[1])
uv, env, python = cfg["uv"], cfg["env"], cfg["python"]


def space(path):
    try:
        s = os.statvfs(path)
        return {"bytes_free": s.f_bavail * s.f_frsize, "inodes_free": s.f_favail}
    except OSError:
        return None


def fail(step, returncode):
    # A negative return code is the signal that killed the step (SIGXFSZ: the file-size
    # limit); the daemon names the limit.
    print(json.dumps({
        "failed": {
            "step": step,
            "returncode": returncode,
            "space": {p: space(p) for p in (env, "/tmp")},
        }
    }))
    sys.exit(1)


def run(step, argv):
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr)
    if r.returncode != 0:
        fail(step, r.returncode)


run("venv", [uv, "venv", "--quiet", "--python", python, env])
source = []
if cfg["index_url"]:
    source += ["--index-url", cfg["index_url"]]
else:
    source += ["--no-index"]
if cfg["find_links"]:
    source += ["--find-links", cfg["find_links"]]
run("install", [
    uv, "pip", "install", "--python", env + "/bin/python", "--only-binary", ":all:",
    *source, "--", *cfg["requirements"],
])

site_packages = None
lib = os.path.join(env, "lib")
for name in sorted(os.listdir(lib)):
    candidate = os.path.join(lib, name, "site-packages")
    if name.startswith("python") and os.path.isdir(candidate) and not os.path.islink(candidate):
        site_packages = candidate
        break
if site_packages is None:
    print(json.dumps({"failed": {"step": "layout", "returncode": 1, "space": {}}}))
    sys.exit(1)

# Bytecode now: jobs get the environment read-only and could not cache it, so every
# import would recompile (numpy: ~300 ms per run). Hash-based, unchecked: the
# environment never changes after this, and its checksum is verified by the daemon.
# -j 0: one worker per CPU (forks of this interpreter, which has imported nothing of
# the environment).
run("compile", [
    python, "-I", "-S", "-m", "compileall", "-q", "-j", "0",
    "--invalidation-mode", "unchecked-hash", site_packages,
])


def field(text, key):
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first empty line
        k, sep, v = line.partition(":")
        if sep and k.strip().lower() == key:
            return v.strip()
    return None


resolved = []
for name in sorted(os.listdir(site_packages)):
    path = os.path.join(site_packages, name, "METADATA")
    if not name.endswith(".dist-info") or os.path.islink(path) or not os.path.isfile(path):
        continue
    with open(path, "rb") as f:
        text = f.read(65536).decode("utf-8", "replace")
    project, version = field(text, "name"), field(text, "version")
    if project and version:
        resolved.append(f"{project}=={version}")

import platform
import sysconfig

libc = " ".join(platform.libc_ver())
print(json.dumps({
    "resolved": resolved,
    "python_version": platform.python_version(),
    "platform": f"{sysconfig.get_platform()} {libc}".strip(),
}))
