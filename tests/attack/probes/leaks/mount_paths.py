# Host paths in our mount table: the daemon's state dir, socket dir, the test's dirs.
text = open("/proc/self/mountinfo").read() + open("/proc/self/mounts").read()
hints = [ARGS["state_dir"], os.path.dirname(ARGS["daemon_socket"]), ARGS["canary_dir"]]
found = [h for h in hints if h in text]
if found:
    escaped(f"mount table names host paths: {found}")
blocked(f"{len(text.splitlines())} mount lines, none names {hints}")
