# Ten threads each sum a slice; results are combined under a lock.
import json, threading

total, lock, names = 0, threading.Lock(), []

def work(i):
    global total
    s = sum(range(i * 100_000, (i + 1) * 100_000))
    with lock:
        total += s
        names.append(threading.current_thread().name)

threads = [threading.Thread(target=work, args=(i,), name=f"t{i}") for i in range(10)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"total": total, "threads": sorted(names),
                  "expected": sum(range(1_000_000))}))
