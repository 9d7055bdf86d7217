# Fill a tmpfs: argv[1] is the directory, argv[2] "bytes" (16 MiB files until a write
# fails) or "inodes" (empty files until a create fails). Exits 0 with the evidence.
import errno, json, os, sys

where, mode = sys.argv[1], sys.argv[2]
made, written, error = 0, 0, None
chunk = b"\x5a" * (1 << 20)
try:
    while True:
        fd = os.open(f"{where}/bomb-{made}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        made += 1
        try:
            if mode == "bytes":
                for _ in range(16):
                    written += os.write(fd, chunk)
        finally:
            os.close(fd)
except OSError as e:
    error = errno.errorcode.get(e.errno, str(e.errno))
st = os.statvfs(where)
print(json.dumps({"files": made, "written": written, "error": error,
                  "free_blocks": st.f_bavail, "free_inodes": st.f_favail,
                  "size": st.f_blocks * st.f_frsize, "inodes": st.f_files}))
