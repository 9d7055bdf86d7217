# The daemon's environment (the test started it with a secret in a variable): is any of
# it in ours?
env = open("/proc/self/environ", "rb").read()
if has_secret(env) or any(has_secret(v) for v in os.environ.values()):
    escaped("the daemon's secret is in our environment")
blocked(f"{len(os.environ)} variables ({sorted(os.environ)}), none holds the secret")
