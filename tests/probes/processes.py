# multiprocessing (fork) and subprocess: the usual ways Python code uses more processes.
import json, multiprocessing, os, subprocess, sys

def square(x):
    return x * x, os.getpid()

with multiprocessing.get_context("fork").Pool(4) as pool:
    results = pool.map(square, range(20))
child = subprocess.run([sys.executable, "-c", "import os; print(6 * 7, os.getppid())"],
                       capture_output=True, text=True, check=True)
print(json.dumps({
    "squares": [r[0] for r in results],
    "pool_pids": len({r[1] for r in results}),
    "parent": os.getpid(),
    "subprocess": child.stdout.split(),
}))
