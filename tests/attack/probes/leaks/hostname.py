# The host's name.
import socket
names = {os.uname().nodename, socket.gethostname(), open("/proc/sys/kernel/hostname").read().strip()}
if ARGS["host_hostname"] in names:
    escaped(f"the host's name {ARGS['host_hostname']!r} is visible")
blocked(f"hostname {sorted(names)}, not the host's")
