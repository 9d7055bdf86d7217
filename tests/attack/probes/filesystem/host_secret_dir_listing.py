# List the host directory holding the planted secret.
kind, val = attempt(lambda: os.listdir(ARGS["canary_dir"]))
if kind == "ok":
    if "secret.txt" in val:
        escaped(f"listed {ARGS['canary_dir']}: {sorted(val)}")
    unclear(f"listed {sorted(val)}, without secret.txt")
decide_errno(f"listdir {ARGS['canary_dir']}", val, {"ENOENT", "EACCES", "EPERM"}, set())
