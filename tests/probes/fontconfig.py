# Fontconfig as matplotlib's font manager uses it: its configuration under /etc/fonts,
# and `fc-list --format=%{file}\n` (matplotlib's own call), run with the job's stderr as
# its stderr, as matplotlib runs it (subprocess.check_output).
import errno, json, shutil, subprocess

ev = {"fonts_conf": None, "fc_list": None}
try:
    with open("/etc/fonts/fonts.conf", "rb") as f:
        ev["fonts_conf"] = f.read(5).decode()
except OSError as e:
    ev["fonts_conf"] = errno.errorcode.get(e.errno, str(e.errno))
fc_list = shutil.which("fc-list")
if fc_list:
    r = subprocess.run([fc_list, "--format=%{file}\n"], stdout=subprocess.PIPE)
    files = r.stdout.decode().split("\n")[:-1]
    ev["fc_list"] = {
        "returncode": r.returncode,
        "fonts": len(files),
        "outside_usr": [f for f in files if not f.startswith("/usr/")],
    }
print(json.dumps(ev))
