# The i386 ABI through int 0x80 from 64-bit code (a filter checking only x86_64 numbers
# would be bypassed). Tried in a child; the filter's answer is to kill it with SIGSYS.
import mmap, signal
def go():
    code = bytes([0xB8, 0x14, 0, 0, 0, 0xCD, 0x80, 0xC3])  # mov eax,20 (getpid); int 0x80; ret
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    fn = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
    return f"returned {fn()}"
status, line = in_child(go)
if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSYS:
    blocked("child killed by SIGSYS at int 0x80")
if line.startswith("returned"):
    escaped(f"int 0x80 getpid {line}")
unclear(f"status {status}, {line}")
