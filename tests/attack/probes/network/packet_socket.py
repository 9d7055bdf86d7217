# An AF_PACKET socket (link-layer frames; a long CVE history).
import socket
kind, val = attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close())
if kind == "ok":
    escaped("socket(AF_PACKET) created")
decide_errno("socket(AF_PACKET)", val, {"EPERM", "EACCES", "EAFNOSUPPORT"}, set())
