# Open a TCP server (bind + listen on any address) inside the job.
import socket
def go():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("0.0.0.0", 0))
    s.listen()
    return s.getsockname()[1]
kind, val = attempt(go)
if kind == "ok":
    escaped(f"listening on TCP port {val}")
decide_errno("socket+bind+listen TCP", val, {"EPERM", "EACCES", "EAFNOSUPPORT"}, set())
