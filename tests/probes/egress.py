# What a sandbox with an egress proxy (network.egress, and every package install from
# an index) can reach. argv: the host's planted TCP port, the host's planted UDP port,
# the allowed upstream's port (an echo server on the host's 127.0.0.1).
import errno, json, os, socket, sys

host_tcp, host_udp, allowed = (int(a) for a in sys.argv[1:4])
proxy = ("127.0.0.1", 3128)


def attempt(fn):
    try:
        return {"ok": fn()}
    except socket.gaierror as e:
        return {"gaierror": e.args[0]}
    except OSError as e:
        return {"errno": errno.errorcode.get(e.errno, str(e.errno))}


def tcp(host, port):
    s = socket.create_connection((host, port), timeout=2)
    s.close()
    return "connected"


def udp_send(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"from the sandbox", (host, port))
    s.close()
    return "sent"


def route(host):
    # connect() on a UDP socket only looks the route up: nothing is sent.
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((host, 53))
    name = s.getsockname()[0]
    s.close()
    return name


def listening():
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def through_proxy(target, payload=b""):
    s = socket.create_connection(proxy, timeout=5)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    status = head.split(b"\r\n", 1)[0].decode(errors="replace")
    echoed = ""
    if payload and " 200 " in status + " ":
        s.sendall(payload)
        echoed = s.recv(4096).decode(errors="replace")
    s.close()
    return {"status": status, "echoed": echoed}


print(json.dumps({
    "direct_host_tcp": attempt(lambda: tcp("127.0.0.1", host_tcp)),
    "direct_allowed": attempt(lambda: tcp("127.0.0.1", allowed)),
    "direct_other_loopback": attempt(lambda: tcp("127.0.0.2", allowed)),
    "udp_to_host": attempt(lambda: udp_send("127.0.0.1", host_udp)),
    "route_outside": attempt(lambda: route("192.0.2.1")),
    "dns": attempt(lambda: socket.getaddrinfo("pypi.org", 443)),
    "listening": attempt(listening),
    "interfaces": attempt(lambda: sorted(n for _, n in socket.if_nameindex())),
    "proxy_allowed": attempt(lambda: through_proxy(f"127.0.0.1:{allowed}", b"ping")),
    "proxy_host_tcp": attempt(lambda: through_proxy(f"127.0.0.1:{host_tcp}")),
    "proxy_other_loopback": attempt(lambda: through_proxy(f"127.0.0.2:{allowed}")),
    "proxy_env": os.environ.get("HTTPS_PROXY"),
}))
