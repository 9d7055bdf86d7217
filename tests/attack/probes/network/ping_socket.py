# An unprivileged ICMP "ping" socket.
import socket
kind, val = attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP).close())
if kind == "ok":
    escaped("ICMP datagram socket created")
decide_errno("socket(AF_INET, SOCK_DGRAM, ICMP)", val, {"EPERM", "EACCES", "EAFNOSUPPORT"}, set())
