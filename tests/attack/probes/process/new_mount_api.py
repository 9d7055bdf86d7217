# The new mount API: fsopen("tmpfs") and open_tree(OPEN_TREE_CLONE) of /usr.
_, e1 = syscall(430, ctypes.c_char_p(b"tmpfs"), 0)
_, e2 = syscall(428, -100, ctypes.c_char_p(b"/usr"), 1)
if e1 is None or e2 is None:
    escaped(f"fsopen: {e1 or 'fd'}; open_tree: {e2 or 'fd'}")
if e1 in ("EPERM", "ENOSYS") and e2 in ("EPERM", "ENOSYS"):
    blocked(f"fsopen: {e1}; open_tree: {e2}")
unclear(f"fsopen: {e1}; open_tree: {e2}")
