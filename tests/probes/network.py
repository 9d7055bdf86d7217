# Reaching the host's loopback. argv[1]: a port the test listens on, on the host.
import errno, json, socket, sys

def attempt(fn):
    try:
        return {"ok": fn()}
    except OSError as e:
        return {"errno": errno.errorcode.get(e.errno, str(e.errno))}

def connect():
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
    s.close()
    return "connected"

def unix_pair():
    a, b = socket.socketpair()
    a.sendall(b"ping")
    return b.recv(4).decode()

print(json.dumps({
    "tcp_connect": attempt(connect),
    "unix_socketpair": attempt(unix_pair),
    # Lists interfaces over netlink, which the seccomp policy may refuse.
    "interfaces": attempt(lambda: [name for _, name in socket.if_nameindex()]),
}))
