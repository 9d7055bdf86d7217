# name_to_handle_at: the first half of the "shocker" open-by-handle escape. A NULL handle
# buffer makes the kernel answer EFAULT once the call is past the filter.
_, err = syscall(303, -100, ctypes.c_char_p(b"/usr"), 0, 0, 0)
decide_errno("name_to_handle_at(/usr, NULL)", err, {"EPERM", "ENOSYS"}, {"EFAULT", "EINVAL", "EOVERFLOW"})
