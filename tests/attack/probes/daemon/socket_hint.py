# Connect to the daemon's socket at the path an attacker would guess (the test passes the
# real path as that guess). Nothing is written to it.
import socket
def go():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(ARGS["daemon_socket"])
    return "connected"
kind, val = attempt(go)
if kind == "ok":
    escaped(f"connected to the daemon at {ARGS['daemon_socket']}")
decide_errno(f"connect {ARGS['daemon_socket']}", val, {"ENOENT", "EACCES", "EPERM", "ECONNREFUSED"}, set())
