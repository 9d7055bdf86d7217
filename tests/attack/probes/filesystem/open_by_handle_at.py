# open_by_handle_at (the "shocker" escape): a forged ext4 handle for inode 2 (the root of
# the filesystem behind /usr), which would open the host's real root directory.
import struct
handle = ctypes.create_string_buffer(struct.pack("=Ii", 8, 1) + struct.pack("=II", 2, 0))
mount_fd = os.open("/usr", os.O_RDONLY | os.O_DIRECTORY)
fd, err = syscall(304, mount_fd, handle, os.O_RDONLY | os.O_DIRECTORY)
if err is None:
    escaped(f"opened inode 2 by handle: {sorted(os.listdir(fd))[:8]}")
decide_errno("open_by_handle_at(inode 2)", err, {"EPERM", "ENOSYS"}, {"ESTALE", "EINVAL", "EFAULT"})
