# asyncio: concurrent sleeps and an asyncio subprocess.
import asyncio, json, sys, time

async def nap(i):
    await asyncio.sleep(0.2)
    return i

async def main():
    start = time.monotonic()
    naps = await asyncio.gather(*(nap(i) for i in range(10)))
    elapsed = time.monotonic() - start
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "print('from child')", stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    return {"naps": naps, "concurrent": elapsed < 1.0, "child": out.decode().strip(),
            "returncode": proc.returncode}

print(json.dumps(asyncio.run(main())))
