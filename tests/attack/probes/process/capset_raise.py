# Raise every capability with capset (v3).
class hdr(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
data = (ctypes.c_uint32 * 6)(*([0xffffffff] * 6))
_, err = syscall(126, ctypes.byref(hdr(0x20080522, 0)), data)
decide_errno("capset(all)", err, {"EPERM", "ENOSYS"}, set())
