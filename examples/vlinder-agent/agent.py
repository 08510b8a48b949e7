#!/usr/bin/env python3
"""A todo agent written for VlinderCLI, run by convo unchanged (standard library only).

VlinderCLI's agent contract: `POST /invoke` with the user's text as the raw
body, answered with raw text; `GET /health` for readiness; state through
`http://sqlite-kv.vlinder.local:3544` (`POST /get`, `/put`, `/delete`,
`/list` with `{"path", "content"}`) and inference through
`http://ollama.vlinder.local:3544/v1/chat/completions`. Under
`convo run --dialect vlinder -- python3 agent.py` those hosts reach convo
through the HTTP_PROXY convo sets; nothing here knows about convo.
"""
import json
import os
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KV = "http://sqlite-kv.vlinder.local:3544"
INFER = "http://ollama.vlinder.local:3544/v1/chat/completions"


def post(url, doc):
    req = urllib.request.Request(url, data=json.dumps(doc).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.read()
    except (urllib.error.URLError, OSError):
        return None


def load():
    body = post(KV + "/get", {"path": "/todos.json"})
    return json.loads(body) if body else []


def save(todos):
    post(KV + "/put", {"path": "/todos.json", "content": json.dumps(todos)})


def remark(text):
    body = post(INFER, {
        "model": os.environ.get("TODO_MODEL", "llama3.2"),
        "messages": [
            {"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": text},
        ],
    })
    try:
        return json.loads(body)["choices"][0]["message"]["content"]
    except (TypeError, ValueError, KeyError, IndexError):
        return None


def answer(text):
    todos = load()
    verb, _, item = text.strip().partition(" ")
    verb = verb.lower()
    if verb == "add" and item:
        todos.append(item)
        save(todos)
        head = f"added {item}"
    elif verb in ("remove", "done") and item in todos:
        todos.remove(item)
        save(todos)
        head = f"removed {item}"
    elif verb == "list":
        head = "your list"
    else:
        head = f"I know add ITEM, remove ITEM and list; not {text!r}"
    out = f"{head}: " + (", ".join(todos) if todos else "(empty)")
    said = remark(out)
    return out + (f"\n{said}" if said else "")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reply(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.reply(200, b"ok")
        else:
            self.reply(404, b"not found")

    def do_POST(self):
        text = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        if self.path != "/invoke":
            self.reply(404, b"not found")
            return
        self.reply(200, answer(text).encode())

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8080"))), Handler).serve_forever()
