# Thread bomb: start sleeping threads until the pids limit refuses one (threads are tasks
# and count against pids.max). The refusal is an uncaught RuntimeError: the job fails.
import sys, threading, time

n = 0
try:
    while True:
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
        n += 1
except RuntimeError:
    print(f'{{"threads": {n}}}', flush=True)
    raise
