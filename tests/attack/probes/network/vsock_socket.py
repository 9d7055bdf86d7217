# An AF_VSOCK socket (the VM host's side). Created only; never connected.
import socket
kind, val = attempt(lambda: socket.socket(40, socket.SOCK_STREAM).close())
if kind == "ok":
    escaped("socket(AF_VSOCK) created")
decide_errno("socket(AF_VSOCK)", val, {"EPERM", "EACCES", "EAFNOSUPPORT"}, set())
