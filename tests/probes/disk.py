# Write argv[1] MiB into /work, in 50 MiB files, until the tmpfs is full; keep the files.
import errno, json, os, sys

want, written, error = int(sys.argv[1]) << 20, 0, None
chunk = b"\xa5" * (1 << 20)
n = 0
while written < want and error is None:
    fd = os.open(f"/work/fill-{n}.bin", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    n += 1
    try:
        in_file = 0
        while in_file < 50 << 20 and written < want:
            k = os.write(fd, chunk)
            in_file += k
            written += k
    except OSError as e:
        error = errno.errorcode.get(e.errno, str(e.errno))
    finally:
        os.close(fd)
st = os.statvfs("/work")
print(json.dumps({"written": written, "error": error, "free_blocks": st.f_bavail,
                  "size": st.f_blocks * st.f_frsize}))
