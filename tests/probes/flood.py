# Write argv[2] bytes to stream argv[1] in one go, then linger argv[3] seconds, then say done.
import os, sys, time

fd = 1 if sys.argv[1] == "stdout" else 2
data = b"x" * int(sys.argv[2])
while data:
    data = data[os.write(fd, data):]
time.sleep(float(sys.argv[3]))
os.write(2 if fd == 1 else 1, b"done\n")
