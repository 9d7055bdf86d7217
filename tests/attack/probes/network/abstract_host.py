# Connect to an abstract unix socket the test listens on in the host's namespace. Nothing
# is written to it.
import socket
name = "\0" + ARGS["abstract_name"]
def go():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(name)
    return "connected"
kind, val = attempt(go)
if kind == "ok":
    escaped(f"connected to the host's abstract socket @{ARGS['abstract_name']}")
decide_errno(f"connect @{ARGS['abstract_name']}", val, {"ECONNREFUSED", "EPERM", "EACCES", "ENOENT"}, set())
