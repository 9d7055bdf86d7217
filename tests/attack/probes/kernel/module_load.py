# Load and unload kernel modules: finit_module on a bad fd, delete_module of a name that
# does not exist.
_, e1 = syscall(313, -1, ctypes.c_char_p(b""), 0)
_, e2 = syscall(176, ctypes.c_char_p(b"vivarium_no_such_module"), 0)
if e1 in ("EPERM", "ENOSYS") and e2 in ("EPERM", "ENOSYS"):
    blocked(f"finit_module: {e1}; delete_module: {e2}")
if e1 in ("EBADF",) or e2 in ("ENOENT",):
    escaped(f"reached the module loader: finit_module {e1}, delete_module {e2}")
unclear(f"finit_module {e1}, delete_module {e2}")
