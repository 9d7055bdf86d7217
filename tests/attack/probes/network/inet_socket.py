# Create an AF_INET socket at all.
import socket
kind, val = attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
if kind == "ok":
    escaped("socket(AF_INET, SOCK_STREAM) created")
decide_errno("socket(AF_INET)", val, {"EPERM", "EACCES", "EAFNOSUPPORT"}, set())
