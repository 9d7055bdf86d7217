# Fork argv[1] children that each live a second. argv[2] == "strict": exit 1 if any fork
# failed; "lenient": exit 0 anyway.
import errno, json, os, sys, time

children, failures = [], []
for _ in range(int(sys.argv[1])):
    try:
        pid = os.fork()
    except OSError as e:
        failures.append(errno.errorcode.get(e.errno, str(e.errno)))
        continue
    if pid == 0:
        time.sleep(1)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
print(json.dumps({"forked": len(children), "failed": len(failures),
                  "errnos": sorted(set(failures))}), flush=True)
sys.exit(1 if failures and sys.argv[2] == "strict" else 0)
