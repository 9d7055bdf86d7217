# Output flood: argv[1] (stdout|stderr|line) and argv[2] GiB. "line" writes to stdout
# through the text layer, one line that never ends (no newline at all).
import os, sys

total = int(sys.argv[2]) << 30
block = 1 << 20
if sys.argv[1] == "line":
    s = "x" * block
    for _ in range(total // block):
        sys.stdout.write(s)
else:
    fd = 1 if sys.argv[1] == "stdout" else 2
    data = b"y" * block
    for _ in range(total // block):
        os.write(fd, data)
