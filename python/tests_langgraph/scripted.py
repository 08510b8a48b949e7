"""A scripted OpenAI-compatible model for the LangGraph tests: it calls a
tool when the last user message asks for one and answers with the tool's
result after it. Deterministic (a replay must match it) and counting its
calls (a replay must make none)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def answer(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message for a conversation."""
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return {"role": "assistant", "content": f"Done: {last.get('content')}"}
    text = str(last.get("content") or "")
    words = text.split()
    for tool in ("weather", "book"):
        if words and words[0] == tool:
            call = {
                "id": f"call_{len(messages)}",
                "type": "function",
                "function": {"name": tool, "arguments": json.dumps({"city": words[-1]})},
            }
            return {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"role": "assistant", "content": f"You said: {text}"}


class _Handler(BaseHTTPRequestHandler):
    server: Model

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        self.server.calls += 1
        msg = answer(body.get("messages") or [])
        doc = {
            "id": f"chatcmpl-{self.server.calls}",
            "object": "chat.completion",
            "created": 1700000000,
            "model": body.get("model", "m"),
            "choices": [
                {
                    "index": 0,
                    "message": msg,
                    "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
        }
        data = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Model(ThreadingHTTPServer):
    """The scripted model on a free loopback port; `url` ends in `/v1`."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.calls = 0
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops answering (a second call does nothing)."""
        if self._thread.is_alive():
            self.shutdown()
            self.server_close()
            self._thread.join()
