# The host's unix sockets in /proc/net/unix (the daemon's socket, the test's abstract one).
text = open("/proc/net/unix").read()
hints = [ARGS["daemon_socket"], "@" + ARGS["abstract_name"]]
found = [h for h in hints if h in text]
if found:
    escaped(f"/proc/net/unix lists host sockets: {found}")
blocked(f"/proc/net/unix has {len(text.splitlines()) - 1} sockets, none of {hints}")
