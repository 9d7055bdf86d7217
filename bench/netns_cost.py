"""What a fresh network namespace costs, with `lo` down and brought up (as root).

Forks N children that each `unshare(CLONE_NEWNET)` and, in the second kind, bring `lo`
up with SIOCGIFFLAGS/SIOCSIFFLAGS, as the spawner does for a private loopback. Reports
wall time and the machine's busy CPU time (/proc/stat, every CPU: the kernel's
asynchronous namespace teardown included, after a 3 s settle) per namespace, alternating
the kinds so that drift falls on both.

  python3 bench/netns_cost.py [--n 300]
"""
import argparse
import ctypes
import fcntl
import os
import socket
import struct
import time

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1
libc = ctypes.CDLL(None, use_errno=True)


def busy_jiffies():
    fields = list(map(int, open("/proc/stat").readline().split()[1:]))
    return sum(fields) - fields[3] - fields[4]  # minus idle and iowait


def child(up):
    if libc.unshare(CLONE_NEWNET) != 0:
        os._exit(1)
    if up:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0)))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))
    os._exit(0)


def run(n, up):
    hz = os.sysconf("SC_CLK_TCK")
    t0, c0 = time.time(), busy_jiffies()
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            child(up)
        _, status = os.waitpid(pid, 0)
        assert status == 0, "unshare or ioctl failed (run as root)"
    wall = time.time() - t0
    time.sleep(3)
    cpu = (busy_jiffies() - c0) / hz
    return wall / n * 1000, cpu / n * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=300)
    args = ap.parse_args()
    for up in (False, True, False, True):
        wall, cpu = run(args.n, up)
        print(f"lo {'up  ' if up else 'down'}: {wall:.2f} ms wall, {cpu:.2f} ms machine CPU per namespace")


if __name__ == "__main__":
    main()
