# The daemon's state directory (the job anchors live there).
kind, val = attempt(lambda: os.listdir(ARGS["state_dir"]))
if kind == "ok":
    escaped(f"listed {ARGS['state_dir']}: {val}")
decide_errno(f"listdir {ARGS['state_dir']}", val, {"ENOENT", "EACCES", "EPERM"}, set())
