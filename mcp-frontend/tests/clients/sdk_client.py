"""Drive `vivarium-mcp` with the official Python MCP SDK (`pip install mcp`) against a real
daemon, and check what a client sees. Run by `mcp-frontend/tests/mcp_sdk.rs`; by hand:

    python sdk_client.py --server target/debug/vivarium-mcp --socket /path/vivariumd.sock \
        --daemon-pid PID

Prints one `ok <check>` line per passed check and exits non-zero on the first failure.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import asynccontextmanager

import anyio
import jsonschema
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

ARGS: argparse.Namespace


def check(cond: bool, what: str, detail: object = "") -> None:
    if not cond:
        raise AssertionError(f"{what}: {str(detail)[:2000]}")


def ok(name: str) -> None:
    print(f"ok {name}", flush=True)


def job_processes() -> list[tuple[int, str]]:
    """Processes under the daemon other than its spawner: job inits and payloads."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found = []
    frontier = [ARGS.daemon_pid]
    while frontier:
        for pid in children.get(frontier.pop(), []):
            frontier.append(pid)
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            if "__spawner" not in cmd:
                found.append((pid, cmd))
    return found


async def wait_no_job_processes(what: str, seconds: float = 5.0) -> None:
    end = time.monotonic() + seconds
    while job_processes():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: job processes left after {seconds} s: {job_processes()}")
        await anyio.sleep(0.05)


def params(*extra: str, socket: str | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=ARGS.server,
        args=["--socket", socket or ARGS.socket, *extra],
        env={"VIVARIUM_LOG": "info"},
    )


@asynccontextmanager
async def session(*extra: str, socket: str | None = None, modern: bool = False):
    async with stdio_client(params(*extra, socket=socket)) as (read, write):
        async with ClientSession(read, write) as s:
            if modern:
                await s.discover()
            else:
                await s.initialize()
            yield s


def dump(result) -> dict:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def text_of(result: dict) -> str:
    return "\n".join(c.get("text", "") for c in result.get("content", []))


async def call(s: ClientSession, arguments: dict, **kw) -> dict:
    return dump(await s.call_tool("run_python", arguments, **kw))


class Tool:
    def __init__(self, listed: dict, close: dict, list_: dict) -> None:
        self.listed = listed
        self.output = jsonschema.Draft202012Validator(listed["outputSchema"])
        self.close_output = jsonschema.Draft202012Validator(close["outputSchema"])
        self.list_output = jsonschema.Draft202012Validator(list_["outputSchema"])

    def valid(self, result: dict) -> dict:
        check("structuredContent" in result, "result carries structuredContent", result)
        self.output.validate(result["structuredContent"])
        return result["structuredContent"]


async def list_and_validate(s: ClientSession) -> Tool:
    tools = [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in (await s.list_tools()).tools]
    check([t["name"] for t in tools] == ["run_python", "close_session", "list_sessions"],
          "the tools: run_python, close_session, list_sessions", tools)
    t, close, list_ = tools
    for schema in (close["inputSchema"], close["outputSchema"], list_["inputSchema"], list_["outputSchema"]):
        jsonschema.Draft202012Validator.check_schema(schema)
    check(list_["annotations"].get("readOnlyHint") is True, "listing sessions is read-only", list_)
    check(close["inputSchema"]["required"] == ["session_id"], "close_session takes a session_id", close)
    check(close["annotations"].get("destructiveHint") is True, "closing a session is destructive", close)
    jsonschema.Draft202012Validator.check_schema(t["inputSchema"])
    jsonschema.Draft202012Validator.check_schema(t["outputSchema"])
    check(t["inputSchema"]["type"] == "object", "input schema is an object", t["inputSchema"])
    check(t["outputSchema"]["type"] == "object", "output schema is an object", t["outputSchema"])
    check(t["inputSchema"]["required"] == ["code"], "only code is required", t["inputSchema"])
    props = t["inputSchema"]["properties"]
    # The daemon says per profile whether packages work (protocol 4): with uv they do
    # (from PyPI on the stock profiles, so the tool is open-world), without it the
    # parameter is not advertised at all.
    with_packages = bool(ARGS.packages_profile)
    expected_props = {"code", "stdin", "timeout_seconds", "profile", "session_id", "files"} | ({"packages"} if with_packages else set())
    check(set(props) == expected_props, "parameters", props)
    if with_packages:
        check(props["packages"]["type"] == "array" and props["packages"]["items"] == {"type": "string"},
              "packages is a plain list of requirement strings", props["packages"])
    else:
        check("packages" not in t["description"] and "numpy" not in t["description"],
              "no packages advertised without uv", t["description"])
    for name, p in props.items():
        check(not isinstance(p.get("type"), list) and "default" not in p, f"{name} is a plain optional property", p)
    check(props["timeout_seconds"]["exclusiveMinimum"] == 0 and props["timeout_seconds"]["maximum"] >= 30,
          "timeout_seconds is bounded", props["timeout_seconds"])
    check("default" in props["profile"]["enum"], "profile lists the profile names", props["profile"])

    def formats(v: object) -> list[str]:
        if isinstance(v, dict):
            return ([v["format"]] if isinstance(v.get("format"), str) else []) + [f for x in v.values() for f in formats(x)]
        if isinstance(v, list):
            return [f for x in v for f in formats(x)]
        return []

    check(formats(t["inputSchema"]) + formats(t["outputSchema"]) == [], "only standard formats (none here)", t)
    check("ok" in t["outputSchema"]["properties"]["reason"]["enum"], "reason is an enum", t["outputSchema"])
    for name, p in props.items():
        check(len(p.get("description", "")) > 20, f"parameter {name} is described", p)
    check("`default`" in props["profile"]["description"], "profile names the daemon's profiles", props["profile"])
    out = t["outputSchema"]["properties"]
    for field in ("exit_code", "reason", "stdout", "stderr", "wall_ms", "cpu_ms", "peak_memory_bytes", "packages"):
        check(field in out, f"output schema has {field}", out)
    a = t["annotations"]
    expected = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False, "openWorldHint": with_packages}
    for k, v in expected.items():
        check(a.get(k) is v, f"annotation {k} is {v}", a)
    check(a.get("title"), "annotation title", a)
    d = t["description"]
    # The daemon's profile runs /usr/bin/python3, the interpreter this venv was made from:
    # the description names its version (the daemon reads it from the interpreter's name).
    python = f"Python {sys.version_info.major}.{sys.version_info.minor} script"
    for needle in ("no network", python, "30 s wall", "Examples", "session_id", "10 minutes", "1 hour", "state is then lost", "close_session"):
        check(needle in d, f"description mentions {needle!r}", d)
    fp = props["files"]
    check(fp["type"] == "array" and fp["items"]["required"] == ["path", "content"]
          and fp["items"]["properties"]["encoding"]["enum"] == ["text", "base64"] and fp["maxItems"] >= 100,
          "files is an array of {path, content, encoding}", fp)
    for needle in ("relative to /work", "100 files", "16 MiB per file", "32 MiB together", "replaced"):
        check(needle in fp["description"], f"files' description mentions {needle!r}", fp["description"])
    sd = props["session_id"]["description"]
    for needle in ("\"new\"", "10 minutes", "1 hour", "lost", "expired"):
        check(needle in sd, f"session_id's description mentions {needle!r}", sd)
    check("session" in t["outputSchema"]["properties"] and "session" not in t["outputSchema"].get("required", []),
          "the output schema has an optional session", t["outputSchema"])
    return Tool(t, close, list_)


async def main_session() -> None:
    async with session("--max-calls-per-minute", "0") as s:
        tool = await list_and_validate(s)
        ok("list_tools: schemas valid, parameters described, annotations explicit")

        r = await call(s, {"code": "print(1)"})
        sc = tool.valid(r)
        check(r.get("isError") is False, "print(1) succeeds", r)
        check(sc["exit_code"] == 0 and sc["reason"] == "ok", "exit 0, reason ok", sc)
        check(sc["stdout"]["text"] == "1\n" and sc["stdout"]["total_bytes"] == 2, "stdout", sc)
        check(sc["wall_ms"] > 0 and sc["peak_memory_bytes"] > 0, "usage reported", sc)
        check("session" not in sc and "session" not in text_of(r), "a stateless result has no session", r)
        ok("run print(1): structuredContent matches outputSchema")

        r = await call(s, {"code": "import sys; print(sys.stdin.read().upper())", "stdin": "hello"})
        check(tool.valid(r)["stdout"]["text"] == "HELLO\n", "stdin is fed", r)
        ok("stdin")

        # Input files: a CSV as text and a small binary file as base64, read by the code.
        import base64

        blob = bytes([0, 1, 2, 253, 254, 255]) + "é".encode()
        code = (
            "import csv, hashlib\n"
            "rows = list(csv.DictReader(open('data/sales.csv', encoding='utf-8')))\n"
            "print(sum(int(r['total']) for r in rows), rows[-1]['region'])\n"
            "b = open('bin/blob.bin', 'rb').read()\n"
            "print(len(b), hashlib.sha256(b).hexdigest())\n"
        )
        r = await call(s, {"code": code, "files": [
            {"path": "data/sales.csv", "content": "region,total\nnorth,10\nsüd,32\n"},
            {"path": "bin/blob.bin", "content": base64.b64encode(blob).decode(), "encoding": "base64"},
        ]})
        sc = tool.valid(r)
        import hashlib

        want = f"42 süd\n{len(blob)} {hashlib.sha256(blob).hexdigest()}\n"
        check(r.get("isError") is False and sc["stdout"]["text"] == want, "the files are there, byte for byte", r)
        for bad, needle in [
            ({"path": "x.bin", "content": "AAH/\nAAH/", "encoding": "base64"}, 'files[0] ("x.bin"): `content` is not valid base64 (a line break at offset 4)'),
            ({"path": "../x", "content": "x"}, 'input file "../x": the path has a `.` or `..` component'),
            ({"path": "/etc/x", "content": "x"}, "relative to /work"),
            ({"path": "x", "content": "x", "encoding": "utf8"}, "`encoding` must be \"text\" or \"base64\""),
        ]:
            r = await call(s, {"code": "print('ran')", "files": [bad]})
            t = text_of(r)
            check(r.get("isError") is True and needle in t and "structuredContent" not in r
                  and ("Nothing ran" in t or "encoding" in bad),
                  f"bad file {bad} -> tool error with {needle!r}", r)
        # Past the profile's bound (100 files by default): the daemon's refusal, as a tool error.
        r = await call(s, {"code": "print('ran')", "files": [{"path": f"f{i}", "content": ""} for i in range(101)]})
        t = text_of(r)
        check(r.get("isError") is True and t.startswith("invalid input file: 101 input files") and "max_input_files" in t
              and "Nothing ran" in t, "the daemon's refusal is a tool error with its message", r)
        ok("files: a CSV as text and a binary as base64 read by the code; bad base64, bad paths and the daemon's refusal are tool errors")

        r = await call(s, {"code": "def f():\n    1/0\nf()\n"})
        sc = tool.valid(r)
        check(r.get("isError") is True, "an exception is a tool error", r)
        check(sc["reason"] == "error" and sc["exit_code"] == 1, "reason error, exit 1", sc)
        first = r["content"][0]["text"]
        check("ZeroDivisionError" in first and "Traceback" in first, "the traceback leads the error text", first)
        ok("exception: isError with traceback")

        r = await call(s, {"code": "import time; time.sleep(10)", "timeout_seconds": 1})
        sc = tool.valid(r)
        check(r.get("isError") is True and sc["reason"] == "timeout", "timeout is a tool error", r)
        check("wall" in sc["limits_hit"] and sc["wall_ms"] < 5000, "wall limit hit", sc)
        check("wall-clock limit" in r["content"][0]["text"], "reason text", r)
        ok("timeout_seconds: limit enforced, isError with reason")

        r = await call(s, {"code": "for i in range(50000): print(f'line {i}')"})
        sc = tool.valid(r)
        expected = sum(len(f"line {i}\n") for i in range(50000))
        out = sc["stdout"]
        check(out["truncated"] and out["total_lines"] == 50000 and out["total_bytes"] == expected, "totals", out)
        check(len(out["text"]) <= 8000, "excerpt within the budget", len(out["text"]))
        check(out["text"].startswith("line 0\n") and out["text"].endswith("line 49999\n"), "head and tail", out["text"][:50])
        ok("long output: head+tail excerpt with exact totals")

        # A failing run with 1 MB on each stream: the text stays within the budget (8,000
        # by default, under Claude Code's 10,000), is JSON, and holds each excerpt once.
        code = (
            "import sys\nprint('OUT-HEAD')\nsys.stderr.write('ERR-HEAD\\n')\n"
            "for _ in range(10_000):\n    print('o' * 99)\n    sys.stderr.write('e' * 99 + '\\n')\n"
            "print('OUT-TAIL')\n1/0\n"
        )
        r = await call(s, {"code": code})
        sc = tool.valid(r)
        check(r.get("isError") is True and sc["reason"] == "error", "the big failing run fails", sc["reason"])
        check(len(r["content"]) == 1, "one text block", len(r["content"]))
        text = r["content"][0]["text"]
        check(len(text) <= 8000, "the text fits the budget", len(text))
        as_json = json.loads(text)
        check(as_json["error"].startswith("the script exited with code 1"), "the text leads with why", as_json["error"])
        for sentinel in ("OUT-HEAD", "OUT-TAIL", "ERR-HEAD", "ZeroDivisionError"):
            check(text.count(sentinel) == 1, f"{sentinel} once in the text", text)
        check(sc["stdout"]["total_bytes"] == 1_000_018 and sc["stderr"]["truncated"], "structured totals", sc["stdout"])
        ok(f"text budget: {len(text)} characters of JSON for 1 MB on both streams")

        r = await call(s, {"code": "print('x' * 10_000_000)"})
        sc = tool.valid(r)
        why = json.loads(r["content"][0]["text"])["error"]
        check(sc["reason"] == "output_limit" and "stdout went over the cap of 1M (1048576 bytes) per output stream" in why,
              "the output-limit text names the stream and the cap", why)
        check(len(r["content"][0]["text"]) <= 8000, "the 10 MB print's text fits", len(r["content"][0]["text"]))
        ok(f"output limit: {why!r}")

        for bad, needle in [
            ({}, "missing field `code`"),
            ({"code": 5}, "`code` must be a string of Python source, got a number"),
            ({"code": "1", "timeout_seconds": "2"}, "`timeout_seconds` must be a number of seconds greater than 0"),
            ({"code": "1", "cmd": "x"}, "unknown field `cmd`"),
            ({"code": "1", "timeout_seconds": -1}, "greater than 0"),
            ({"code": "1", "timeout_seconds": 3600}, "timeout_seconds"),
            ({"code": "1", "profile": "nope"}, "invalid profile"),
        ]:
            r = await call(s, bad)
            check(r.get("isError") is True and needle in text_of(r), f"bad arguments {bad} -> tool error with {needle!r}", r)
        ok("bad arguments: tool errors, not protocol errors")

        r = await call(s, {"code": "#" * (1 << 20) + "\nprint(1)"})
        check(r.get("isError") is True and "at most 1048576" in text_of(r), "code over maxLength is a tool error", text_of(r))
        # A request line over the stdio limit gets a JSON-RPC error for its id (rmcp alone
        # dropped it and the call waited forever).
        from mcp.shared.exceptions import MCPError

        try:
            with anyio.fail_after(60):
                await s.call_tool("run_python", {"code": "print(1)", "stdin": "x" * (17 << 20)})
            check(False, "an oversized request is answered with an error")
        except MCPError as e:
            check("request too large" in str(e.error.message), "the error says the request is too large", e.error)
        r = await call(s, {"code": "print(3)"})
        check(tool.valid(r)["stdout"]["text"] == "3\n", "the session works after an oversized request", r)
        ok("oversized request line: a JSON-RPC error for its id, the session goes on")

        stamps: list[tuple[float, float, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            stamps.append((time.monotonic(), progress, message))

        code = "import time\nfor i in range(8):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.5)\n"
        t0 = time.monotonic()
        r = await call(s, {"code": code}, progress_callback=on_progress)
        check(r.get("isError") is False, "progress job succeeds", r)
        check(len(stamps) >= 2, "progress notifications arrived", stamps)
        values = [p for _, p, _ in stamps]
        check(all(b > a for a, b in zip(values, values[1:])), "progress increases", values)
        times = [t0] + [t for t, _, _ in stamps]
        check(max(b - a for a, b in zip(times, times[1:])) <= 2.5, "a notification at least every 2 s", times)
        check(any(m and "tick" in m for _, _, m in stamps), "messages carry the latest output line", stamps)
        ok(f"progress: {len(stamps)} notifications, increasing, latest line {stamps[-1][2]!r}")

        # Cancel: the SDK sends notifications/cancelled when the call's scope is cancelled.
        running = anyio.Event()

        async def on_running(progress: float, total: float | None, message: str | None) -> None:
            if message and "sleeping" in message:
                running.set()

        scope = anyio.CancelScope()
        async with anyio.create_task_group() as tg:

            async def long_call() -> None:
                with scope:
                    await call(s, {"code": "print('sleeping', flush=True)\nimport time\ntime.sleep(60)"}, progress_callback=on_running)

            tg.start_soon(long_call)
            with anyio.fail_after(15):
                await running.wait()
            check(job_processes(), "the job runs before the cancel", job_processes())
            scope.cancel()
        await wait_no_job_processes("after notifications/cancelled")
        r = await call(s, {"code": "print(2)"})
        check(tool.valid(r)["stdout"]["text"] == "2\n", "the server still works after a cancel", r)
        ok("cancel: notifications/cancelled killed the job, no job process left")


def expiry_of(ss: dict) -> float:
    """The session's `expires_at` (RFC 3339 UTC) as a Unix time; checks its form."""
    import datetime

    at = ss["expires_at"]
    check(isinstance(at, str) and at.endswith("Z") and "T" in at, "expires_at is RFC 3339 UTC", ss)
    return datetime.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


async def close(s: ClientSession, tool: Tool, session_id: str) -> dict:
    r = dump(await s.call_tool("close_session", {"session_id": session_id}))
    if not r.get("isError"):
        check("structuredContent" in r, "close_session carries structuredContent", r)
        tool.close_output.validate(r["structuredContent"])
    return r


async def listed(s: ClientSession, tool: Tool) -> list[str]:
    r = dump(await s.call_tool("list_sessions", {}))
    check(r.get("isError") is False, "list_sessions succeeds", r)
    tool.list_output.validate(r["structuredContent"])
    return [x["session_id"] for x in r["structuredContent"]["sessions"]]


async def cell_when_free(s: ClientSession, arguments: dict) -> dict:
    """A cell, retried while the session still finishes an interrupted one."""
    end = time.monotonic() + 10
    while True:
        r = await call(s, arguments)
        if "running another cell" not in text_of(r) or time.monotonic() > end:
            return r
        await anyio.sleep(0.1)


async def sessions_session() -> None:
    """A session through the SDK: open with `x = 1`, cells that keep state and return the
    last expression's value, an exception and a timeout that keep it, a cancel that
    interrupts the cell, ids bound to this server, close, and the typed expiry."""
    async with session("--max-calls-per-minute", "0") as s:
        tool = await list_and_validate(s)
        r = await call(s, {"code": "x = 1", "session_id": "new"})
        sc = tool.valid(r)
        check(r.get("isError") is False and sc["reason"] == "ok", "opening a session runs its first cell", r)
        ss = sc["session"]
        sid = ss["session_id"]
        check(sid.startswith("mcp_") and len(sid) == 36, "the id is this server's alias (mcp_ + 128 bits)", ss)
        check(ss["opened"] is True and ss["cell"] == 1 and ss["value"] is None and ss["state_kept"] is True,
              "cell 1 of a new session, a statement has no value", ss)
        check(500 < ss["expires_in_seconds"] <= 600, "expires in the default idle TTL", ss)
        check(abs(expiry_of(ss) - (time.time() + ss["expires_in_seconds"])) < 5, "expires_at agrees", ss)
        check("vs_" not in json.dumps(r), "the daemon's handle is not shown", r)
        check(await listed(s, tool) == [sid], "list_sessions shows the session by its id", sid)

        for n, code, value, out in [
            (2, "x += 1\nprint('x is', x)\nx * 10", "20", "x is 2\n"),
            (3, "import math\ny = math.sqrt(16)\ny", "4.0", ""),
            (4, "x, y", "(2, 4.0)", ""),
        ]:
            r = await call(s, {"code": code, "session_id": sid})
            sc = tool.valid(r)
            ss = sc["session"]
            check(r.get("isError") is False and ss["cell"] == n and ss["value"] == value and ss["opened"] is False,
                  f"cell {n}: the state persists and the value comes back", r)
            check(sc["stdout"]["text"] == out, f"cell {n}'s stdout", sc["stdout"])
            check(json.loads(text_of(r))["session"]["value"] == value, f"cell {n}'s value is in the text too", text_of(r))
        ok("session: opened with x = 1, three cells keep the state and return their values")

        # Files in a session: sent with one call, still in /work for the next; a file at
        # the same path is replaced; what is not a regular file there is not, and the cell
        # does not run.
        r = await call(s, {"code": "open('notes/a.txt').read()", "session_id": sid,
                           "files": [{"path": "notes/a.txt", "content": "v1"}]})
        check(r.get("isError") is False and tool.valid(r)["session"]["value"] == "'v1'", "a cell's file", r)
        r = await call(s, {"code": "import os\nos.mkdir('adir')\nopen('notes/a.txt').read()", "session_id": sid})
        check(r.get("isError") is False and tool.valid(r)["session"]["value"] == "'v1'", "the next cell still reads it", r)
        r = await call(s, {"code": "open('notes/a.txt').read()", "session_id": sid,
                           "files": [{"path": "notes/a.txt", "content": "djI=", "encoding": "base64"}]})
        check(tool.valid(r)["session"]["value"] == "'v2'", "a file at the same path is replaced", r)
        r = await call(s, {"code": "ran = True", "session_id": sid, "files": [{"path": "adir", "content": "x"}]})
        sc = tool.valid(r)
        e = sc["session"]["exception"]
        why = json.loads(text_of(r))["error"]
        check(r.get("isError") is True and e["type"] == "vivarium.InputFileError" and "adir" in e["message"]
              and sc["session"]["state_kept"] is True, "a directory at the path: vivarium.InputFileError", r)
        check("did not run" in why and "adir" in why, "the text says the code did not run", why)
        r = await call(s, {"code": "'ran' in globals(), x", "session_id": sid})
        check(tool.valid(r)["session"]["value"] == "(False, 2)", "nothing of that cell ran; the state is there", r)
        ok(f"session files: persist between calls, replaced at the same path; {why[:90]!r}...")

        r = await call(s, {"code": "def f():\n    1/0\nf()", "session_id": sid})
        sc = tool.valid(r)
        e = sc["session"]["exception"]
        check(r.get("isError") is True and sc["reason"] == "error" and e["type"] == "ZeroDivisionError",
              "an exception in a cell is a tool error with its type", r)
        check("Traceback" in e["traceback"] and "ZeroDivisionError" in e["traceback"], "the traceback", e)
        first = text_of(r)
        check("ZeroDivisionError" in first and "Traceback" in first and "state are kept" in first,
              "the text says what was raised and that the state is kept", first)
        r = await call(s, {"code": "x", "session_id": sid})
        check(tool.valid(r)["session"]["value"] == "2", "the state survives the exception", r)
        ok("session: an exception is isError with the traceback; the state is kept")

        r = await call(s, {"code": "import time\nwhile True:\n    time.sleep(0.05)", "session_id": sid, "timeout_seconds": 1})
        sc = tool.valid(r)
        check(r.get("isError") is True and sc["reason"] == "timeout" and sc["session"]["state_kept"] is True,
              "a cell past its timeout is interrupted, the state kept", r)
        check("state are kept" in text_of(r), "the text says the state is kept", text_of(r))
        r = await cell_when_free(s, {"code": "x", "session_id": sid})
        check(tool.valid(r)["session"]["value"] == "2", "the state survives the timeout", r)
        ok("session: a timed-out cell is interrupted and the state is kept")

        running = anyio.Event()

        async def on_running(progress: float, total: float | None, message: str | None) -> None:
            if message and "napping" in message:
                running.set()

        scope = anyio.CancelScope()
        async with anyio.create_task_group() as tg:

            async def long_cell() -> None:
                with scope:
                    await call(s, {"code": "print('napping', flush=True)\nimport time\ntime.sleep(60)", "session_id": sid},
                               progress_callback=on_running)

            tg.start_soon(long_cell)
            with anyio.fail_after(15):
                await running.wait()
            scope.cancel()
        r = await cell_when_free(s, {"code": "x", "session_id": sid})
        check(r.get("isError") is False and tool.valid(r)["session"]["value"] == "2", "the session survives a cancel", r)
        ok("session: a cancelled call interrupts its cell; the session and its state survive")

        async with session() as other:
            r = await call(other, {"code": "x", "session_id": sid})
            check(r.get("isError") is True and "no such session" in text_of(r), "another server instance does not know the id", r)
            r = dump(await other.call_tool("close_session", {"session_id": sid}))
            check(r.get("isError") is True and "no such session" in text_of(r), "nor can it close the session", r)
        r = await call(s, {"code": "x", "session_id": sid})
        check(tool.valid(r)["session"]["value"] == "2", "the session is untouched by the other instance", r)
        r = await call(s, {"code": "x", "session_id": "mcp_" + "0" * 32})
        check(r.get("isError") is True and "no such session" in text_of(r), "an id never minted", r)
        r = await call(s, {"code": "x", "session_id": "bogus"})
        check(r.get("isError") is True and 'must be "new"' in text_of(r), "a malformed id", r)
        ok("session ids are bound to the server instance that minted them")

        r = await close(s, tool, sid)
        sc = r["structuredContent"]
        check(r.get("isError") is False and sc["closed_now"] is True and sc["reason"] == "closed" and sc["cells"] >= 8,
              "close_session ends it and reports its cells", r)
        r = await call(s, {"code": "x", "session_id": sid})
        t = text_of(r)
        check(r.get("isError") is True and "was closed" in t and "state is gone" in t and 'session_id: "new"' in t,
              "a closed session's id is a typed error saying how to start again", r)
        r = await close(s, tool, sid)
        check(r.get("isError") is False and r["structuredContent"]["closed_now"] is False, "closing twice says it had ended", r)
        check(await listed(s, tool) == [], "a closed session is not listed", sid)
        ok("close_session: cells and CPU reported; the id then answers that the session expired")

        r = await call(s, {"code": "z = 3", "session_id": "new", "profile": ARGS.session_ttl_profile})
        sc = tool.valid(r)
        check(r.get("isError") is False and sc["session"]["expires_in_seconds"] <= 1, "a session with a 1 s idle TTL", r)
        short = sc["session"]["session_id"]
        await anyio.sleep(2.5)
        r = await call(s, {"code": "z", "session_id": short})
        t = text_of(r)
        for needle in ("has expired", "idle", "state is gone", "/work", 'session_id: "new"'):
            check(r.get("isError") is True and needle in t, f"the idle expiry's text has {needle!r}", r)
        r = await close(s, tool, short)
        check(r["structuredContent"]["reason"] == "idle_timeout", "closing an expired session says why it ended", r)
        ok(f"idle expiry: {t[:120]!r}...")

        if ARGS.viv:
            handle = subprocess.run([ARGS.viv, "session", "new", "--socket", ARGS.socket],
                                    check=True, capture_output=True, text=True).stdout.strip()
            check(handle.startswith("vs_"), "viv session new prints a handle", handle)
            r = await call(s, {"code": "h = 'handed'\nh", "session_id": handle})
            sc = tool.valid(r)
            check(r.get("isError") is False and sc["session"]["value"] == "'handed'"
                  and sc["session"]["session_id"] == handle, "a daemon handle handed over is used as given", r)
            r = await close(s, tool, handle)
            check(r.get("isError") is False and r["structuredContent"]["closed_now"] is True, "and closed", r)
            ok("handover: a daemon handle (vs_...) passed as session_id works on any instance")

        r = await call(s, {"code": "w = 1", "session_id": "new"})
        check(r.get("isError") is False, "a session left open", r)
    # The server closed the session it had left open when its stdin closed.
    await wait_no_job_processes("after the MCP server exited with a session open")
    ok("sessions left open are closed when the client goes away; no session process left")


async def modern_session() -> None:
    async with session(modern=True) as s:
        tool = await list_and_validate(s)
        r = await call(s, {"code": "print('modern')"})
        check(tool.valid(r)["stdout"]["text"] == "modern\n", "2026-07-28 call", r)
    ok("2026-07-28 (server/discover, stateless) client works")


async def reload_session() -> None:
    """A daemon reload that adds a profile reaches the client: tools.listChanged is
    declared, notifications/tools/list_changed arrives, and tools/list shows the profile."""
    from mcp import types

    changed = anyio.Event()

    async def on_message(message) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    extra = os.path.join(ARGS.profiles_dir, "reloadtest.toml")
    async with stdio_client(params("--profile-refresh", "0.2")) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as s:
            init = await s.initialize()
            caps = init.capabilities.tools
            check(caps is not None and caps.list_changed is True, "tools.listChanged is declared", init.capabilities)
            before = (await s.list_tools()).tools[0].input_schema["properties"]["profile"]
            check("reloadtest" not in before["enum"], "no reloadtest profile yet", before)
            with open(os.path.join(ARGS.profiles_dir, "default.toml")) as f:
                text = f.read()
            try:
                with open(extra, "w") as f:
                    f.write(text.replace('description = "', 'description = "Reload test: ', 1))
                os.kill(ARGS.daemon_pid, signal.SIGHUP)
                with anyio.fail_after(30):
                    await changed.wait()
                after = (await s.list_tools()).tools[0].input_schema["properties"]["profile"]
                check("reloadtest" in after["enum"], "the new profile is listed", after)
                r = await call(s, {"code": "print('reloaded')", "profile": "reloadtest"})
                check(r.get("isError") is False, "the new profile runs", r)
            finally:
                os.unlink(extra)
                os.kill(ARGS.daemon_pid, signal.SIGHUP)
    ok("daemon reload: notifications/tools/list_changed, and tools/list shows the new profile")


async def discover_only_session() -> None:
    """A 2026-07-28 client that only asks server/discover and closes: a normal end."""
    import tempfile

    with tempfile.TemporaryFile("w+") as errlog:
        async with stdio_client(params(), errlog=errlog) as (read, write):
            async with ClientSession(read, write) as s:
                await s.discover()
        await anyio.sleep(0.2)
        errlog.seek(0)
        log = errlog.read()
    check("could not start" not in log and "ERROR" not in log, "no error log after discover-only", log)
    ok("discover-only session: the server ends without an error")


async def limits_sessions() -> None:
    async with session("--max-calls-per-minute", "2") as s:
        for _ in range(2):
            r = await call(s, {"code": "pass"})
            check(r.get("isError") is False, "calls within the rate limit", r)
        r = await call(s, {"code": "pass"})
        check(r.get("isError") is True and "rate limit" in text_of(r), "the third call is rate limited", r)
    ok("rate limit: clear tool error")

    async with session("--max-concurrent-jobs", "1", "--max-queued-calls", "1") as s:
        running = anyio.Event()
        queued = anyio.Event()

        async def on_running(progress: float, total: float | None, message: str | None) -> None:
            if message and "busy" in message:
                running.set()

        async def on_queued(progress: float, total: float | None, message: str | None) -> None:
            if message and message.startswith("queued"):
                queued.set()

        scope = anyio.CancelScope()
        second: dict = {}
        async with anyio.create_task_group() as tg:

            async def long_call() -> None:
                with scope:
                    await call(s, {"code": "print('busy', flush=True)\nimport time\ntime.sleep(60)"}, progress_callback=on_running)

            async def queued_call() -> None:
                second.update(await call(s, {"code": "print('after')"}, progress_callback=on_queued))

            tg.start_soon(long_call)
            with anyio.fail_after(15):
                await running.wait()
            tg.start_soon(queued_call)
            with anyio.fail_after(15):
                await queued.wait()
            # The queue (1 place) is full: the next call is refused, saying when to retry.
            r = await call(s, {"code": "pass"})
            t = text_of(r)
            check(r.get("isError") is True and "too many calls at once" in t and "retry in" in t, "a full queue refuses", r)
            scope.cancel()
        check(second.get("isError") is False and second["structuredContent"]["stdout"]["text"] == "after\n",
              "the queued call ran once the slot was free", second)
        await wait_no_job_processes("after cancelling the concurrency test's job")
    ok("queue: a call past the slots waits with 'queued' progress; past the queue a refusal says when to retry")

    # The default 4 slots and 8 concurrent calls: every call succeeds (4 of them queue).
    async with session("--max-calls-per-minute", "0") as s:
        results: list[dict] = []

        async def one(i: int) -> None:
            results.append(await call(s, {"code": f"import time; time.sleep(0.5); print({i})"}))

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(one, i)
        check(len(results) == 8 and all(r.get("isError") is False for r in results), "8 concurrent calls succeed", results)
        check(sorted(r["structuredContent"]["stdout"]["text"] for r in results) == [f"{i}\n" for i in range(8)], "each ran", results)
    ok("concurrency 8 with 4 slots: all calls succeed")


async def no_daemon_session() -> None:
    missing = "/nonexistent/vivarium/vivariumd.sock"
    async with session(socket=missing) as s:
        await list_and_validate_loose(s)
        r = await call(s, {"code": "print(1)"})
        t = text_of(r)
        check(r.get("isError") is True and "sudo vivariumd --profiles" in t and missing in t, "how to start a daemon", r)
    ok("no daemon: the first call says how to start one")


async def list_and_validate_loose(s: ClientSession) -> None:
    tools = (await s.list_tools()).tools
    check([t.name for t in tools] == ["run_python", "close_session", "list_sessions"], "tools listed without a daemon", tools)


def rpc(proc: subprocess.Popen, msg: dict) -> None:
    proc.stdin.write((json.dumps(msg) + "\n").encode())
    proc.stdin.flush()


def read_msg(proc: subprocess.Popen, lines: list[str]) -> dict:
    line = proc.stdout.readline().decode()
    check(line, "server stdout still open")
    lines.append(line)
    return json.loads(line)


def stdin_eof() -> None:
    """Raw JSON-RPC: a job runs, stdin closes, the server exits promptly and the job dies."""
    proc = subprocess.Popen(
        [ARGS.server, "--socket", ARGS.socket],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    lines: list[str] = []
    try:
        rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
        check(read_msg(proc, lines)["id"] == 1, "initialize answered")
        rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "run_python", "_meta": {"progressToken": "tok-eof"},
            "arguments": {"code": "print('eof-test', flush=True)\nimport time\ntime.sleep(60)"}}})
        deadline = time.monotonic() + 15
        while True:
            check(time.monotonic() < deadline, "progress with the job's output in time", lines)
            msg = read_msg(proc, lines)
            if msg.get("method") == "notifications/progress":
                check(msg["params"]["progressToken"] == "tok-eof", "the progress token is echoed", msg)
                if "eof-test" in msg["params"].get("message", ""):
                    break
        check(job_processes(), "the job runs before stdin closes", job_processes())
        t0 = time.monotonic()
        proc.stdin.close()
        rest = proc.stdout.read().decode()
        proc.wait(timeout=5)
        elapsed = time.monotonic() - t0
        check(elapsed < 2.0, "the server exits promptly on stdin EOF", elapsed)
        lines += rest.splitlines(keepends=True)
        for line in lines:
            check(json.loads(line).get("jsonrpc") == "2.0", "stdout carries JSON-RPC only", line)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    anyio.run(wait_no_job_processes, "after stdin EOF")
    ok(f"stdin EOF: server exited in {elapsed * 1000:.0f} ms, job killed, stdout was JSON-RPC only")


async def packages_session() -> None:
    async with session("--max-calls-per-minute", "0") as s:
        tool = await list_and_validate(s)
        args = {
            "code": "import vivtiny; print(vivtiny.answer())",
            "packages": ["vivtiny"],
            "profile": ARGS.packages_profile,
        }
        r = await call(s, args)
        sc = tool.valid(r)
        check(r.get("isError") is False and sc["stdout"]["text"] == "42\n", "the package imports", r)
        check(sc["packages"] == {"resolved": ["vivtiny==1.0"], "from_cache": False}, "packages reported", sc)
        r = await call(s, args)
        check(tool.valid(r)["packages"]["from_cache"] is True, "the second run reuses the environment", r)
        r = await call(s, {**args, "packages": ["nosuchpkg"]})
        check(r.get("isError") is True and "nosuchpkg" in text_of(r), "an unknown package is a tool error naming it", r)
        r = await call(s, {"code": "print(1)"})
        check(tool.valid(r)["packages"] is None, "packages is null without packages", r)
    ok("packages: install, cached reuse, typed refusal; structuredContent matches outputSchema")


async def amain() -> None:
    await main_session()
    await sessions_session()
    if ARGS.packages_profile:
        await packages_session()
    await modern_session()
    await discover_only_session()
    await reload_session()
    await limits_sessions()
    await no_daemon_session()


async def daemon_stop_session() -> None:
    """Last, as it stops the daemon: a job killed by the daemon's shutdown is reported as
    the daemon stopping, not as the user's cancel."""
    async with session() as s:
        running = anyio.Event()

        async def on_running(progress: float, total: float | None, message: str | None) -> None:
            if message and "long job" in message:
                running.set()

        result: dict = {}
        async with anyio.create_task_group() as tg:

            async def long_call() -> None:
                result.update(await call(s, {"code": "print('long job', flush=True)\nimport time\ntime.sleep(60)"}, progress_callback=on_running))

            tg.start_soon(long_call)
            with anyio.fail_after(15):
                await running.wait()
            os.kill(ARGS.daemon_pid, signal.SIGTERM)
        t = text_of(result)
        check(result.get("isError") is True and "daemon stopped" in t and "did not run to its end" in t,
              "the daemon's stop is named as such", result)
        check(not t.startswith("cancelled"), "not a user's cancel", t)
    ok("daemon stop mid-call: the result says the daemon stopped and the job did not finish")


def main() -> int:
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--socket", required=True)
    p.add_argument("--daemon-pid", type=int, required=True)
    p.add_argument("--profiles-dir", required=True, help="the daemon's profiles directory (the reload check adds one)")
    p.add_argument("--packages-profile", help="a profile with a wheelhouse: run the packages checks")
    p.add_argument("--session-ttl-profile", required=True, help="a profile whose sessions have a 1 s idle TTL")
    p.add_argument("--viv", help="the `viv` CLI: its `viv session new` opens the session handed over")
    ARGS = p.parse_args()
    anyio.run(amain)
    stdin_eof()
    anyio.run(daemon_stop_session)
    print("all checks passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
