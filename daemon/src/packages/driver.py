# The install driver: runs inside the install sandbox as /work/main.py (see
# daemon/src/packages/install.rs). argv[1] is a JSON object from the daemon. uv's
# diagnostics go to stderr (parsed by the daemon); the last stdout line is the result.
import json
import subprocess
import sys

cfg = json.loads(sys.argv[1])
uv, env = cfg["uv"], cfg["env"]


def uv_run(*args, capture=False):
    r = subprocess.run(
        [uv, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if capture else sys.stderr,
        stderr=sys.stderr,
        text=True,
    )
    if r.returncode != 0:
        sys.exit(r.returncode or 1)
    return r.stdout


uv_run("venv", "--quiet", "--python", cfg["python"], env)
source = []
if cfg["index_url"]:
    source += ["--index-url", cfg["index_url"]]
else:
    source += ["--no-index"]
if cfg["find_links"]:
    source += ["--find-links", cfg["find_links"]]
# Wheels only: no source distribution's build code ever runs. Bytecode is compiled
# now (compiling parses, it does not execute): jobs get the environment read-only and
# could not cache it, so every import would recompile (numpy: ~300 ms per run).
uv_run(
    "pip", "install", "--python", env + "/bin/python", "--only-binary", ":all:",
    "--compile-bytecode", *source, "--", *cfg["requirements"],
)
frozen = uv_run("pip", "freeze", "--python", env + "/bin/python", capture=True)
version = ""
with open(env + "/pyvenv.cfg") as f:
    for line in f:
        key, _, value = line.partition("=")
        if key.strip() in ("version_info", "version"):
            version = value.strip()
import platform, sysconfig

libc = " ".join(platform.libc_ver())
print(json.dumps({
    "resolved": [l for l in frozen.splitlines() if "==" in l],
    "python_version": version,
    "platform": f"{sysconfig.get_platform()} {libc}".strip(),
}))
