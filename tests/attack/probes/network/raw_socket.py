# A raw IP socket (forge any packet).
import socket
kind, val = attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close())
if kind == "ok":
    escaped("socket(AF_INET, SOCK_RAW) created")
decide_errno("socket(AF_INET, SOCK_RAW)", val, {"EPERM", "EACCES", "EAFNOSUPPORT"}, set())
