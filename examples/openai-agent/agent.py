#!/usr/bin/env python3
"""A todo agent on the official `openai` SDK with tool calls, for convo's harness.

The model decides which tool to call (add_todo, remove_todo, list_todos);
the tools keep the list in convo's key-value state (key "todos"), so a fork
of the timeline has the list as it was at the fork point and a replay
answers the model's calls from the recording. Contract: docs/AGENTS.md.
"""
import json
import os
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from openai import OpenAI

MODEL = os.environ.get("TODO_MODEL", "llama3.2")

TOOLS = [
    {"type": "function", "function": {
        "name": "add_todo", "description": "Add an item to the todo list.",
        "parameters": {"type": "object", "properties": {"item": {"type": "string"}},
                       "required": ["item"]}}},
    {"type": "function", "function": {
        "name": "remove_todo", "description": "Remove an item from the todo list.",
        "parameters": {"type": "object", "properties": {"item": {"type": "string"}},
                       "required": ["item"]}}},
    {"type": "function", "function": {
        "name": "list_todos", "description": "The todo list.",
        "parameters": {"type": "object", "properties": {}}}},
]


class Kv:
    """convo's key-value state: GET/PUT {kv_url}/{key}."""

    def __init__(self, url):
        self.url = url

    def get(self, key, default):
        try:
            with urllib.request.urlopen(f"{self.url}/{key}", timeout=30) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return default
            raise

    def put(self, key, value):
        req = urllib.request.Request(f"{self.url}/{key}", data=json.dumps(value).encode(), method="PUT")
        urllib.request.urlopen(req, timeout=30).close()


def run_tool(kv, name, args):
    todos = kv.get("todos", [])
    if name == "add_todo":
        todos.append(args["item"])
        kv.put("todos", todos)
    elif name == "remove_todo" and args.get("item") in todos:
        todos.remove(args["item"])
        kv.put("todos", todos)
    return json.dumps(todos)


def answer(text, services):
    client = OpenAI(base_url=services["openai_base_url"], max_retries=0)
    kv = Kv(services["kv_url"])
    messages = [
        {"role": "system", "content": "You keep the user's todo list with the tools."},
        {"role": "user", "content": text},
    ]
    for _ in range(8):
        reply = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        msg = reply.choices[0].message
        if not msg.tool_calls:
            return msg.content or ""
        messages.append(msg.model_dump(exclude_none=True))
        for call in msg.tool_calls:
            result = run_tool(kv, call.function.name, json.loads(call.function.arguments or "{}"))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return "(too many tool calls)"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
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
