# A NETLINK_ROUTE socket (interfaces, routes, and much kernel code behind it).
import socket
kind, val = attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close())
if kind == "ok":
    escaped("socket(AF_NETLINK, NETLINK_ROUTE) created")
decide_errno("socket(AF_NETLINK)", val, {"EPERM", "EACCES", "EAFNOSUPPORT"}, set())
