# Kernel addresses (KASLR defeat): /proc/kallsyms and /proc/modules.
kind, val = attempt(lambda: open("/proc/kallsyms").read().splitlines()[:2000])
if kind == "ok":
    nonzero = [l for l in val if l.split()[0].strip("0")]
    if nonzero:
        escaped(f"{len(nonzero)} of {len(val)} kallsyms addresses are real: {nonzero[0]}")
    blocked(f"all {len(val)} kallsyms addresses read are 0")
decide_errno("read /proc/kallsyms", val, {"ENOENT", "EACCES", "EPERM"}, set())
