# Map page 0 (NULL-dereference exploits need it).
import mmap
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
ctypes.set_errno(0)
ret = libc.mmap(0, mmap.PAGESIZE, 3, 0x22 | 0x10, -1, 0)  # PRIVATE|ANONYMOUS|FIXED at 0
if ret == ctypes.c_void_p(-1).value:
    decide_errno("mmap(0, MAP_FIXED)", ename(ctypes.get_errno()), {"EPERM", "EACCES"}, set())
escaped(f"mapped address {ret}")
