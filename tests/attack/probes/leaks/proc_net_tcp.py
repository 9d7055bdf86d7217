# The host's sockets in /proc/net/tcp (the test listens on the host's loopback).
port = "%04X" % ARGS["port"]
text = open("/proc/net/tcp").read()
lines = text.splitlines()[1:]
if any(l.split()[1].endswith(":" + port) for l in lines):
    escaped(f"/proc/net/tcp lists the host's listener on port {ARGS['port']}")
blocked(f"/proc/net/tcp has {len(lines)} sockets, not the host's port {ARGS['port']}")
