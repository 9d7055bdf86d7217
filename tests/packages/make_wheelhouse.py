"""Write a tiny wheelhouse by hand (no network, no build backend): used by the package
tests. Usage: make_wheelhouse.py DIR [PORT]

- vivtiny 1.0          pure-Python wheel: vivtiny.answer() == 42
- vivdep 1.0 / 2.0     wheels; vivtiny has no dependency on it
- vivneeds 1.0         wheel requiring vivdep==1.0 (so `vivneeds` + `vivdep==2.0` conflict)
- vivsdist 1.0         an sdist only (.tar.gz): never built, so "no wheel"
- vivbig 1.0           a wheel holding 3 MiB of incompressible data (size limits)
- vivmany 1.0          a wheel of 3,000 empty files (inode limits)
- vivpth 1.0           a wheel whose .pth file, if anything runs it, writes a marker into
                       sys.prefix and /tmp and connects to 127.0.0.1:PORT (default 9):
                       install-time code must never run it, a job's `site` does
- vivevil 1.0          a wheel that ships a module named `vivtiny` (answer() == 666) and a
                       .pth that, if run at install time, rewrites the environment to
                       claim it is vivtiny 1.0 (the cache-poisoning attempt)
"""
import base64, hashlib, io, os, sys, tarfile, zipfile


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def wheel(out, name, version, files, requires=()):
    dist = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = dict(files)
    files[f"{dist}/METADATA"] = meta.encode()
    files[f"{dist}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: vivarium-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    lines = [record_line(p, d) for p, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(lines) + "\n").encode()
    path = os.path.join(out, f"{name}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in files.items():
            z.writestr(p, d)


def sdist(out, name, version):
    path = os.path.join(out, f"{name}-{version}.tar.gz")
    pkg = f"{name}-{version}"
    setup = b"raise SystemExit('sdist code ran')\n"
    pkginfo = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    with tarfile.open(path, "w:gz") as t:
        for p, d in [(f"{pkg}/setup.py", setup), (f"{pkg}/PKG-INFO", pkginfo)]:
            info = tarfile.TarInfo(p)
            info.size = len(d)
            t.addfile(info, io.BytesIO(d))


PTH_BOOT = """import os, socket, sys
def _vivpth():
    for path in (os.path.join(sys.prefix, "vivpth-ran-at-install"), "/tmp/vivpth-ran"):
        try:
            with open(path, "w") as f:
                f.write("ran\\n")
        except OSError:
            pass
    try:
        s = socket.create_connection(("127.0.0.1", PORT), timeout=2)
        s.sendall(b"vivpth ran\\n")
        s.close()
    except OSError:
        pass
_vivpth()
"""

EVIL_BOOT = """import os, shutil, sys
def _vivevil():
    site = os.path.dirname(os.path.abspath(__file__))
    src = os.path.join(site, "vivevil-1.0.dist-info")
    dst = os.path.join(site, "vivtiny-1.0.dist-info")
    try:
        if os.path.isdir(src) and not os.path.exists(dst):
            shutil.copytree(src, dst)
            meta = os.path.join(dst, "METADATA")
            with open(meta) as f:
                text = f.read().replace("Name: vivevil", "Name: vivtiny")
            with open(meta, "w") as f:
                f.write(text)
            shutil.rmtree(src)
            with open(os.path.join(sys.prefix, "vivevil-ran-at-install"), "w") as f:
                f.write("ran\\n")
    except OSError:
        pass
_vivevil()
"""


def main(out, port=9):
    os.makedirs(out, exist_ok=True)
    wheel(out, "vivtiny", "1.0", {"vivtiny/__init__.py": b"def answer():\n    return 42\n"})
    for v in ("1.0", "2.0"):
        wheel(out, "vivdep", v, {"vivdep/__init__.py": f"VERSION = {v!r}\n".encode()})
    wheel(out, "vivneeds", "1.0", {"vivneeds/__init__.py": b"import vivdep\n"}, ["vivdep==1.0"])
    sdist(out, "vivsdist", "1.0")
    wheel(out, "vivbig", "1.0", {"vivbig/__init__.py": b"", "vivbig/blob.bin": os.urandom(3 << 20)})
    wheel(out, "vivmany", "1.0", {f"vivmany/f{n}.txt": b"" for n in range(3000)} | {"vivmany/__init__.py": b""})
    wheel(out, "vivpth", "1.0", {
        "vivpth/__init__.py": b"RAN = True\n",
        "vivpth_boot.py": PTH_BOOT.replace("PORT", str(port)).encode(),
        "vivpth.pth": b"import vivpth_boot\n",
    })
    wheel(out, "vivevil", "1.0", {
        "vivtiny/__init__.py": b"def answer():\n    return 666\n",
        "vivevil_boot.py": EVIL_BOOT.encode(),
        "vivevil.pth": b"import vivevil_boot\n",
    })


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:3]))
