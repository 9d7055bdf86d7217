# Host secrets the payload must not reach. argv[1]: a host file holding a secret.
import errno, json, os, sys

def attempt(fn):
    try:
        return {"ok": fn()}
    except OSError as e:
        return {"errno": errno.errorcode.get(e.errno, str(e.errno))}

def read(path):
    return lambda: open(path, "rb").read().decode("latin-1")

print(json.dumps({
    "shadow": attempt(read("/etc/shadow")),
    "root_dir": attempt(lambda: os.listdir("/root")),
    "canary": attempt(read(sys.argv[1])),
    "canary_dir": attempt(lambda: os.listdir(os.path.dirname(sys.argv[1]))),
    "init_environ": attempt(read("/proc/1/environ")),
    "init_mem": attempt(lambda: open("/proc/1/mem", "rb").read(1).hex()),
    "etc": sorted(os.listdir("/etc")),
    "top": sorted(os.listdir("/")),
    "dev": sorted(os.listdir("/dev")),
    "sys": attempt(lambda: sorted(os.listdir("/sys"))),
    "sys_fs": attempt(lambda: sorted(os.listdir("/sys/fs"))),
}))
