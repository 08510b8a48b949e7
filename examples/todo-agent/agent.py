#!/usr/bin/env python3
"""A todo-list agent for convo's harness (docs/AGENTS.md), standard library only.

Inputs: "add ITEM", "remove ITEM", "list". The list lives in convo's
key-value state (key "todos"), so a fork of the timeline has the list as it
was at the fork point. Each turn makes one inference call (to phrase a
short remark); without a model the remark is left out.
"""
import json
import os
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def call(method, url, body=None):
    req = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/octet-stream")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def load(kv):
    status, body = call("GET", kv + "/todos")
    return json.loads(body) if status == 200 else []


def remark(openai, text):
    body = json.dumps({
        "model": os.environ.get("TODO_MODEL", "llama3.2"),
        "messages": [
            {"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": text},
        ],
    }).encode()
    req = urllib.request.Request(openai + "/chat/completions", data=body, method="POST")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())["choices"][0]["message"]["content"]
    except (urllib.error.URLError, KeyError, ValueError, IndexError):
        return None


def answer(text, services):
    kv = services["kv_url"]
    todos = load(kv)
    verb, _, item = text.strip().partition(" ")
    verb = verb.lower()
    if verb == "add" and item:
        todos.append(item)
        call("PUT", kv + "/todos", json.dumps(todos).encode())
        head = f"added {item}"
    elif verb in ("remove", "done") and item in todos:
        todos.remove(item)
        call("PUT", kv + "/todos", json.dumps(todos).encode())
        head = f"removed {item}"
    elif verb == "list":
        head = "your list"
    else:
        head = f"I know add ITEM, remove ITEM and list; not {text!r}"
    out = f"{head}: " + (", ".join(todos) if todos else "(empty)")
    said = remark(services["openai_base_url"], out)
    return out + (f"\n{said}" if said else "")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        req = json.loads(body)
        out = json.dumps({"output": answer(req["input"], req["services"])}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8000"))), Handler).serve_forever()
