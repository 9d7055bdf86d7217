# CPU spin in argv[1] processes (the script's own and argv[1]-1 children), forever.
import os, sys

for _ in range(int(sys.argv[1]) - 1):
    if os.fork() == 0:
        break
while True:
    pass
