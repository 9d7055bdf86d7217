# Output flood: argv[1] (stdout|stderr|line|both) and argv[2] GiB. "line" writes to stdout
# through the text layer, one line that never ends (no newline at all); "both" writes its
# blocks to stdout and stderr in turn. With argv[3] "bigpipe", each flooded stream's pipe
# is first enlarged to 1 MiB (F_SETPIPE_SZ; pipe-max-size is the most an unprivileged
# process gets) and the sizes are printed as JSON evidence on stdout, before the flood.
import fcntl, json, os, sys

F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032
mode = sys.argv[1]
total = int(sys.argv[2]) << 30
block = 1 << 20
fds = {"stdout": [1], "line": [1], "stderr": [2], "both": [1, 2]}[mode]
if sys.argv[3:] == ["bigpipe"]:
    for fd in fds:
        fcntl.fcntl(fd, F_SETPIPE_SZ, 1 << 20)
    sizes = {str(fd): fcntl.fcntl(fd, F_GETPIPE_SZ) for fd in fds}
    os.write(1, (json.dumps({"pipe_size": sizes}) + "\n").encode())
if mode == "line":
    s = "x" * block
    for _ in range(total // block):
        sys.stdout.write(s)
else:
    data = b"y" * block
    for i in range(total // block):
        os.write(fds[i % len(fds)], data)
