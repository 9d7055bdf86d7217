# Raw port IO: iopl(3) and ioperm on the keyboard controller ports.
_, e1 = syscall(172, 3)
_, e2 = syscall(173, 0x60, 8, 1)
if e1 is None or e2 is None:
    escaped(f"iopl: {e1 or 'ok'}; ioperm: {e2 or 'ok'}")
if e1 in ("EPERM", "ENOSYS") and e2 in ("EPERM", "ENOSYS"):
    blocked(f"iopl: {e1}; ioperm: {e2}")
unclear(f"iopl: {e1}; ioperm: {e2}")
