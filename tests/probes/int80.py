# The i386 syscall entry (int 0x80) from a 64-bit process: a filter that checks only the
# x86_64 syscall numbers would be bypassed, so seccomp must kill on the foreign arch.
import ctypes, json, mmap

code = bytes([
    0xB8, 0x14, 0x00, 0x00, 0x00,  # mov eax, 20 (getpid on i386)
    0xCD, 0x80,                    # int 0x80
    0xC3,                          # ret
])
page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
fn = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
print(json.dumps({"stage": "calling int 0x80"}), flush=True)
result = fn()
print(json.dumps({"stage": "returned", "result": result}), flush=True)
