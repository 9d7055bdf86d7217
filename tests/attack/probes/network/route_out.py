# Is there any route off the machine? A UDP connect() only looks the route up and sends
# nothing. TEST-NET addresses (192.0.2.1, 2001:db8::1), so not even a lookup names a host.
import socket
seen = {}
for fam, addr in ((socket.AF_INET, ("192.0.2.1", 9)), (socket.AF_INET6, ("2001:db8::1", 9))):
    def go():
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.connect(addr)
        return s.getsockname()[0]
    kind, val = attempt(go)
    seen[addr[0]] = f"route via {val}" if kind == "ok" else val
if any(v.startswith("route") for v in seen.values()):
    escaped(f"a route leads out: {seen}")
if all(v in ("EPERM", "EACCES", "ENETUNREACH", "EADDRNOTAVAIL", "EAFNOSUPPORT", "EHOSTUNREACH") for v in seen.values()):
    blocked(f"no route: {seen}")
unclear(str(seen))
