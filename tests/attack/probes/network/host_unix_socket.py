# Connect to a unix socket the test listens on at a host path. Nothing is written to it.
import socket
def go():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(ARGS["host_unix_socket"])
    return "connected"
kind, val = attempt(go)
if kind == "ok":
    escaped(f"connected to the host's {ARGS['host_unix_socket']}")
decide_errno(f"connect {ARGS['host_unix_socket']}", val, {"ENOENT", "ECONNREFUSED", "EPERM", "EACCES"}, set())
