# The daemon's well-known socket paths.
import socket
seen = {}
for p in ("/run/vivarium/vivariumd.sock", "/var/run/vivarium/vivariumd.sock",
          "/run/user/0/vivarium/vivariumd.sock", "/tmp/vivarium/vivariumd.sock"):
    def go():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(p)
    kind, val = attempt(go)
    seen[p] = "connected" if kind == "ok" else val
if "connected" in seen.values():
    escaped(f"connected: {seen}")
if all(v in ("ENOENT", "EACCES", "EPERM", "ECONNREFUSED") for v in seen.values()):
    blocked(str(seen))
unclear(str(seen))
