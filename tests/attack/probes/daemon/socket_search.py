# Search every visible directory for unix sockets and connect to each one found (never
# writing to it): the daemon's socket or any other host service.
import socket, stat
found, connected = {}, []
for root, dirs, files in os.walk("/", onerror=lambda e: None):
    if root == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys")]
    for name in files + dirs:
        path = os.path.join(root, name)
        kind, st = attempt(lambda: os.lstat(path))
        if kind == "ok" and stat.S_ISSOCK(st.st_mode):
            for kind_ in (socket.SOCK_STREAM, socket.SOCK_SEQPACKET):
                k, v = attempt(lambda: socket.socket(socket.AF_UNIX, kind_).connect(path))
                found[path] = "connected" if k == "ok" else v
                if k == "ok" or v != "EPROTOTYPE":
                    break
connected = [p for p, v in found.items() if v == "connected"]
if connected:
    escaped(f"connected to host sockets: {connected}")
if not found:
    blocked("no unix socket anywhere in the visible tree")
if all(v in ("EACCES", "EPERM", "ECONNREFUSED") for v in found.values()):
    blocked(f"sockets found but refused: {found}")
unclear(str(found))
