"""Added latency of `convo mcp wrap`: the same tools/call through the
official `mcp` SDK client, straight to the server, through the relay
(recording), and answered by `--replay` (no server).

    python scripts/bench-mcp.py CONVO SERVER_JS [N]

CONVO is the convo binary, SERVER_JS @modelcontextprotocol/server-
everything's dist/index.js; CONVO_HOME should name a scratch home. Prints
the per-call p50 and p90 (ms) of each and the relay's p50 over the
server's own.
"""

import asyncio
import os
import statistics
import sys
import time

from mcp import ClientSession, StdioServerParameters, stdio_client


async def calls(command: str, args: list[str], n: int) -> list[float]:
    params = StdioServerParameters(command=command, args=args, env=dict(os.environ))
    out: list[float] = []
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        for i in range(n + 20):
            t = time.perf_counter()
            await s.call_tool("echo", {"message": "bench"})
            if i >= 20:
                out.append((time.perf_counter() - t) * 1000)
    return out


def line(name: str, xs: list[float]) -> float:
    xs = sorted(xs)
    p50 = statistics.median(xs)
    p90 = xs[int(len(xs) * 0.9)]
    print(f"{name:8} p50 {p50:.3f} ms  p90 {p90:.3f} ms  ({len(xs)} calls)")
    return p50


async def main() -> None:
    convo, server = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    direct = line("direct", await calls("node", [server], n))
    wrap = ["mcp", "wrap", "--session", "bench", "--", "node", server]
    wrapped = line("wrap", await calls(convo, wrap, n))
    replay = ["mcp", "wrap", "--session", "bench", "--replay", "--", "/nonexistent"]
    replayed = line("replay", await calls(convo, replay, n))
    print(f"added by the relay: {wrapped - direct:.3f} ms p50")
    print(f"replay vs server:   {replayed - direct:.3f} ms p50")


if __name__ == "__main__":
    asyncio.run(main())
