# Queue real-time signals until the kernel refuses: the count is charged up the user
# namespace chain to host root, whose every process (other jobs' included) got EAGAIN
# from tgkill(SIGRTMIN) and timer_create while one job held ~96,000 of them.
import signal, threading
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN})
queued, stopped = 0, None
try:
    while queued < 200_000:
        signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)
        queued += 1
except OSError as e:
    stopped = ename(e.errno)
if queued > 1024:
    escaped(f"queued {queued} real-time signals (stopped: {stopped})")
if stopped == "EAGAIN":
    blocked(f"EAGAIN after {queued} queued signals: the job's own RLIMIT_SIGPENDING")
unclear(f"queued {queued}, stopped: {stopped}")
