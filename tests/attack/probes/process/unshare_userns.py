# A nested user namespace: full capabilities inside it, over objects it owns.
def go():
    _, err = syscall(272, 0x10000000)  # unshare(CLONE_NEWUSER)
    if err:
        return err
    return "ok " + [l for l in open("/proc/self/status") if l.startswith("CapEff")][0].strip()
status, line = in_child(go)
if line.startswith("ok"):
    escaped(f"unshare(CLONE_NEWUSER) worked in a child: {line[3:]}")
decide_errno("unshare(CLONE_NEWUSER)", line, {"EPERM", "ENOSYS"}, set())
