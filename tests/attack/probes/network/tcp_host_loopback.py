# TCP to a port the test listens on, on the host's 127.0.0.1.
import socket
def go():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(("127.0.0.1", ARGS["port"]))
    return "connected"
kind, val = attempt(go)
if kind == "ok":
    escaped(f"connected to the host's 127.0.0.1:{ARGS['port']}")
decide_errno(f"connect 127.0.0.1:{ARGS['port']}", val,
             {"EPERM", "EACCES", "ENETUNREACH", "ECONNREFUSED", "EAFNOSUPPORT"}, set())
