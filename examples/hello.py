# What an untrusted script sees inside the Vivarium sandbox.
import os, socket, sys

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()

print(f"hello from Python {sys.version.split()[0]} in the sandbox")
print(f"uid={os.getuid()} gid={os.getgid()} hostname={socket.gethostname()} cwd={os.getcwd()}")
print(f"CapEff={status('CapEff')} NoNewPrivs={status('NoNewPrivs')} Seccomp={status('Seccomp')}")
print(f"processes visible: {sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}")
for path in ("/etc/shadow", "/root"):
    try:
        os.listdir(path) if path == "/root" else open(path).read()
        print(f"{path}: READABLE (unexpected)")
    except OSError as e:
        print(f"{path}: {e.strerror}")
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    print("AF_INET socket: allowed (unexpected)")
except OSError as e:
    print(f"AF_INET socket: {e.strerror}")
