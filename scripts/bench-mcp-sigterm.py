"""How long `convo mcp wrap` takes to stop on SIGTERM mid-run (a client
stopping its servers): the server's stdin closed, the server killed if
still running after 150 ms, the recording written and closed.

    python scripts/bench-mcp-sigterm.py CONVO SERVER_JS [N]

CONVO is the convo binary, SERVER_JS @modelcontextprotocol/server-
everything's dist/index.js; CONVO_HOME should name a scratch home. Each
run initializes, calls `echo`, then sends SIGTERM with the client still
connected. Prints the p50 and max (ms) from the signal to the exit.
"""

import json
import signal
import statistics
import subprocess
import sys
import time
from typing import IO, Any


def call(inp: IO[bytes], out: IO[bytes], rid: int, method: str, params: Any) -> None:
    msg = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    inp.write((json.dumps(msg) + "\n").encode())
    inp.flush()
    while True:
        m = json.loads(out.readline())
        if m.get("id") == rid and "method" not in m:
            return


def once(convo: str, server: str, i: int) -> float:
    p = subprocess.Popen(
        [convo, "mcp", "wrap", "--session", f"sigterm-{i}", "--", "node", server],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert p.stdin is not None and p.stdout is not None
    init = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    }
    call(p.stdin, p.stdout, 0, "initialize", init)
    p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    p.stdin.flush()
    call(p.stdin, p.stdout, 1, "tools/call", {"name": "echo", "arguments": {"message": "x"}})
    t = time.perf_counter()
    p.send_signal(signal.SIGTERM)
    p.wait()
    return (time.perf_counter() - t) * 1000


def main() -> None:
    convo, server = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    ms = [once(convo, server, i) for i in range(n)]
    print(f"SIGTERM to exit: p50 {statistics.median(ms):.0f} ms, max {max(ms):.0f} ms ({n} runs)")


if __name__ == "__main__":
    main()
