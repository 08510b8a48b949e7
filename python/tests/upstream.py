"""A scripted LLM upstream for the tests: OpenAI chat completions and
Anthropic messages, plain and streamed, answering `You asked: <last user
message>`. Counts the calls it answers (a replay must make none)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, str):
                return c
            return " ".join(p.get("text", "") for p in c if isinstance(p, dict))
    return ""


class _Handler(BaseHTTPRequestHandler):
    server: Upstream

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        self.server.calls += 1
        self.server.paths.append(self.path)
        answer = "You asked: " + _last_user_text(body.get("messages") or [])
        model = body.get("model", "m")
        if self.path.endswith("/chat/completions"):
            self._chat(model, answer, bool(body.get("stream")))
        elif self.path.endswith("/messages"):
            self._anthropic(model, answer, bool(body.get("stream")))
        else:
            self._send(404, "application/json", b'{"error": {"message": "not scripted"}}')

    def _send(self, status: int, ctype: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events: list[str]) -> None:
        self._send(200, "text/event-stream", "".join(events).encode())

    def _chat(self, model: str, answer: str, stream: bool) -> None:
        base = {"id": "chatcmpl-1", "created": 1700000000, "model": model}
        if not stream:
            doc = {
                **base,
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": answer},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
            }
            self._send(200, "application/json", json.dumps(doc).encode())
            return
        events = []
        for i, word in enumerate(answer.split(" ")):
            piece = word if i == 0 else " " + word
            delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
            chunk = {
                **base,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            }
            events.append(f"data: {json.dumps(chunk)}\n\n")
        end = {
            **base,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
        events += [f"data: {json.dumps(end)}\n\n", "data: [DONE]\n\n"]
        self._sse(events)

    def _anthropic(self, model: str, answer: str, stream: bool) -> None:
        usage = {"input_tokens": 5, "output_tokens": 4}
        msg = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": answer}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        if not stream:
            self._send(200, "application/json", json.dumps(msg).encode())
            return

        def ev(name: str, data: dict[str, Any]) -> str:
            return f"event: {name}\ndata: {json.dumps(data)}\n\n"

        start = {**msg, "content": [], "stop_reason": None}
        events = [
            ev("message_start", {"type": "message_start", "message": start}),
            ev(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
        ]
        for i, word in enumerate(answer.split(" ")):
            piece = word if i == 0 else " " + word
            events.append(
                ev(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                )
            )
        events += [
            ev("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ev(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 4},
                },
            ),
            ev("message_stop", {"type": "message_stop"}),
        ]
        self._sse(events)


class Upstream(ThreadingHTTPServer):
    """The scripted upstream on a free loopback port; `url` has no `/v1`."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.calls = 0
        self.paths: list[str] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
