"""An MCP client made with the official `mcp` SDK (run by the Rust tests
in test_mcp.rs):

    python mcp_client.py STEPS_JSON stdio CMD [ARGS...]
    python mcp_client.py STEPS_JSON http URL

STEPS_JSON is a list of steps, each `[op, ...args]`: `list_tools`,
`call_tool NAME ARGS`, `call_tool_progress NAME ARGS` (with a
progress token), `list_resources`, `read_resource URI`,
`list_prompts`, `get_prompt NAME ARGS`, `ping`, and `model URL BODY` (a
model call: BODY posted as JSON to URL, as an agent between tool calls). The client initializes,
runs the steps in order and prints one JSON document: `server` (the
name the server gave) and `results`, one per step (the result as JSON,
or `{"error": message}` when the server answered with an error).
"""

import asyncio
import json
import os
import sys
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError


def dump(result: Any) -> Any:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def post(url: str, body: Any) -> Any:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-test"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


async def on_progress(
    progress: float, total: float | None, message: str | None
) -> None:
    """Asks for progress notifications (a progress token is sent)."""


async def step(s: ClientSession, op: str, args: list[Any]) -> Any:
    if op == "model":
        return await asyncio.to_thread(post, args[0], args[1])
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "list_tools": lambda: s.list_tools(),
        "call_tool": lambda: s.call_tool(args[0], args[1]),
        "call_tool_progress": lambda: s.call_tool(
            args[0], args[1], progress_callback=on_progress
        ),
        "list_resources": lambda: s.list_resources(),
        "read_resource": lambda: s.read_resource(args[0]),
        "list_prompts": lambda: s.list_prompts(),
        "get_prompt": lambda: s.get_prompt(args[0], args[1]),
        "ping": lambda: s.send_ping(),
    }
    try:
        return dump(await calls[op]())
    except MCPError as e:
        return {"error": e.error.message, "code": e.error.code}


async def session(s: ClientSession, steps: list[list[Any]]) -> dict[str, Any]:
    init = await s.initialize()
    results = [await step(s, st[0], st[1:]) for st in steps]
    return {"server": init.server_info.name, "results": results}


async def main() -> None:
    steps: list[list[Any]] = json.loads(sys.argv[1])
    transport = sys.argv[2]
    if transport == "stdio":
        params = StdioServerParameters(
            command=sys.argv[3], args=sys.argv[4:], env=dict(os.environ)
        )
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            out = await session(s, steps)
    else:
        from mcp.client.streamable_http import streamable_http_client

        async with (
            streamable_http_client(sys.argv[3]) as streams,
            ClientSession(streams[0], streams[1]) as s,
        ):
            out = await session(s, steps)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
