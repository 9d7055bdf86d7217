# uprobe and uretprobe: the kernel runs them past every seccomp filter
# (seccomp_uprobe_exception), so the allowlist cannot refuse them. Outside a trampoline
# the kernel mapped for a uprobe it refuses them itself: uprobe with ENXIO, uretprobe by
# SIGILL (tried in a child). ENOSYS: a kernel without them.
import resource, signal
_, err = syscall(336)
def uretprobe():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    ret, e = syscall(335)
    return f"returned {ret} {e}"
status, line = in_child(uretprobe)
killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGILL
evidence = f"uprobe: {err or 'succeeded'}; uretprobe: {'SIGILL' if killed else line}"
if err in ("ENXIO", "ENOSYS") and (killed or line == "returned -1 ENOSYS"):
    blocked(evidence)
if err is None or line.startswith("returned"):
    escaped(evidence)
unclear(evidence)
