"""Artifacts as a real MCP client sees them: the official Python SDK calls `run_python` with
code that writes PNGs (pure Python: zlib and struct), a CSV and a symlink to /etc/shadow
under /work/out, and checks the image content (decoded header within 1568 px and 1.15
MP), the captions, the resource links, structuredContent.artifacts (against the output
schema), and reads resources back with `resources/read` (a foreign instance's URI is
refused). Then the same in a session's second cell. Run by tests/tests/mcp_artifacts.rs:

    python artifacts_client.py --server target/debug/vivarium-mcp --socket /path/vivariumd.sock

Prints one `ok <check>` line per passed check and exits non-zero on the first failure.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import struct
import sys

import anyio
import jsonschema
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

ARGS: argparse.Namespace

# Runs in the sandbox: writes a small PNG, a 3000x2000 one, a CSV and a symlink.
WRITE_FILES = r'''
import os, struct, zlib
def png(path, w, h):
    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    row = b"\x00" + b"".join(bytes((x * 255 // w, 128, 64)) for x in range(w))
    raw = row * h
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    data += chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(data)
os.makedirs("/work/out", exist_ok=True)
png("/work/out/small.png", 64, 32)
png("/work/out/wide.png", 3000, 2000)
with open("/work/out/data.csv", "w") as f:
    f.write("x,y\n1,2\n3,4\n")
os.symlink("/etc/shadow", "/work/out/shadow")
print("wrote")
'''


def check(cond: bool, what: str, detail: object = "") -> None:
    if not cond:
        raise AssertionError(f"{what}: {str(detail)[:3000]}")


def ok(name: str) -> None:
    print(f"ok {name}", flush=True)


def dump(result) -> dict:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def png_size(data: bytes) -> tuple[int, int]:
    check(data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "a PNG", data[:32])
    return struct.unpack(">II", data[16:24])


def check_artifacts(result: dict, output: jsonschema.Draft202012Validator, what: str) -> dict:
    check("structuredContent" in result, f"{what}: structuredContent", result)
    output.validate(result["structuredContent"])
    art = result["structuredContent"].get("artifacts")
    check(art is not None, f"{what}: structuredContent.artifacts", result["structuredContent"])
    files = {f["path"]: f for f in art["files"]}
    check({"out/small.png", "out/wide.png", "out/data.csv"} <= set(files), f"{what}: the files", files)
    check(files["out/small.png"]["media_type"] == "image/png", f"{what}: sniffed type", files)
    check(files["out/small.png"]["shown_as"] == "image", f"{what}: small shown as is", files)
    check(files["out/wide.png"]["shown_as"] == "downscaled", f"{what}: wide downscaled", files)
    check(files["out/data.csv"]["shown_as"] == "inlined", f"{what}: csv inlined", files)
    skipped = {s["path"]: s for s in art["skipped"]}
    check(skipped.get("out/shadow", {}).get("kind") == "symlink", f"{what}: the symlink skipped", art)

    content = result["content"]
    images = [c for c in content if c["type"] == "image"]
    check(len(images) == 2, f"{what}: two images", [c["type"] for c in content])
    sizes = []
    for image in images:
        check(image["mimeType"] == "image/png", f"{what}: image/png", image["mimeType"])
        w, h = png_size(base64.b64decode(image["data"]))
        check(max(w, h) <= 1568 and w * h <= 1_150_000, f"{what}: within the budget", (w, h))
        sizes.append((w, h))
    check((64, 32) in sizes, f"{what}: the small one as it is", sizes)
    wide = [s for s in sizes if s != (64, 32)][0]
    check(abs(wide[0] / wide[1] - 1.5) < 0.01, f"{what}: aspect kept", wide)
    texts = "\n".join(c.get("text", "") for c in content if c["type"] == "text")
    check("out/small.png (64x32 px)" in texts, f"{what}: the caption names the image", texts)
    check("downscaled from 3000x2000" in texts, f"{what}: the caption says downscaled", texts)
    check("x,y\n1,2\n3,4\n" in texts, f"{what}: the CSV inlined", texts)
    check("out/shadow (symlink" in texts, f"{what}: the skipped link in words", texts)
    links = [c for c in content if c["type"] == "resource_link"]
    check(len(links) >= 3, f"{what}: resource links", [c["type"] for c in content])
    check(all(l["uri"].startswith("vivarium-artifact://") for l in links), f"{what}: link URIs", links)
    ok(f"{what}: images within the budget with captions, links, structuredContent.artifacts")
    return files


async def main() -> None:
    params = StdioServerParameters(
        command=ARGS.server, args=["--socket", ARGS.socket], env={"VIVARIUM_LOG": "info"}
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            init = await s.initialize()
            check(init.capabilities.resources is not None, "the server declares resources", init)
            tools = [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in (await s.list_tools()).tools]
            output = jsonschema.Draft202012Validator(tools[0]["outputSchema"])

            r = dump(await s.call_tool("run_python", {"code": WRITE_FILES}))
            check(r.get("isError") is False, "the job ran", r)
            files = check_artifacts(r, output, "job")

            # resources/read: the original of the downscaled image, and the CSV as text.
            wide = files["out/wide.png"]
            got = dump(await s.read_resource(wide["uri"]))
            blob = base64.b64decode(got["contents"][0]["blob"])
            check(hashlib.sha256(blob).hexdigest() == wide["sha256"], "the original's sha256", wide)
            check(png_size(blob) == (3000, 2000), "the original at full size", png_size(blob))
            check(got["contents"][0]["mimeType"] == "image/png", "its media type", got["contents"][0])
            csv = dump(await s.read_resource(files["out/data.csv"]["uri"]))
            check(csv["contents"][0]["text"] == "x,y\n1,2\n3,4\n", "the CSV as text", csv)
            ok("resources/read: the full-size original (sha256 matches) and the CSV as text")

            listed = dump(await s.list_resources())
            check({wide["uri"], files["out/data.csv"]["uri"]} <= {x["uri"] for x in listed["resources"]},
                  "resources/list has them", listed)
            ok("resources/list lists this instance's artifacts")

            # A cell: artifacts of a session's second cell.
            first = dump(await s.call_tool("run_python", {"code": "x = 1", "session_id": "new"}))
            sid = first["structuredContent"]["session"]["session_id"]
            second = dump(await s.call_tool("run_python", {"code": WRITE_FILES, "session_id": sid}))
            check(second.get("isError") is False, "the cell ran", second)
            check_artifacts(second, output, "session cell 2")
            await s.call_tool("close_session", {"session_id": sid})

    # Another instance does not serve this one's URIs.
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            from mcp.shared.exceptions import MCPError

            try:
                await s.read_resource(wide["uri"])
            except MCPError as e:
                check("another vivarium-mcp instance" in str(e), "refused, saying why", e)
            else:
                raise AssertionError("another instance served the URI")
            ok("another instance refuses the URI: bound to the instance that produced it")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--socket", required=True)
    ARGS = p.parse_args()
    try:
        anyio.run(main)
    except (AssertionError, BaseExceptionGroup) as e:
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]
        print(f"FAIL {e!r}", flush=True)
        sys.exit(1)
