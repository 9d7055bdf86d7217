# Burn CPU in argv[1] processes until something stops us.
import os, sys

for _ in range(int(sys.argv[1]) - 1):
    if os.fork() == 0:
        break
while True:
    pass
