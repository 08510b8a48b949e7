#!/usr/bin/env python3
"""A LangGraph todo agent whose model calls go through convo (docs/AGENTS.md).

The graph is LangGraph's usual tool loop (a model node, a ToolNode, and
tools_condition between them) with langchain-openai's ChatOpenAI pointed at
the turn's `openai_base_url`. It has no checkpointer: the conversation and
the todo list live in convo's key-value state ("messages", "todos"), so
`convo session fork` resumes the graph with both as they were at the fork
point, and `convo replay` answers its model calls from the recording
instead of calling the model again.
"""
import json
import os
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

from langchain_core.messages import HumanMessage, SystemMessage, messages_from_dict, messages_to_dict
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

MODEL = os.environ.get("TODO_MODEL", "llama3.2")
KV_URL = None  # the current turn's kv_url (one turn at a time)


def kv_get(key, default):
    try:
        with urllib.request.urlopen(f"{KV_URL}/{key}", timeout=30) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return default
        raise


def kv_put(key, value):
    req = urllib.request.Request(f"{KV_URL}/{key}", data=json.dumps(value).encode(), method="PUT")
    urllib.request.urlopen(req, timeout=30).close()


@tool
def add_todo(item: str) -> str:
    """Add an item to the todo list."""
    todos = kv_get("todos", []) + [item]
    kv_put("todos", todos)
    return json.dumps(todos)


@tool
def list_todos() -> str:
    """The todo list."""
    return json.dumps(kv_get("todos", []))


TOOLS = [add_todo, list_todos]


def build(base_url):
    model = ChatOpenAI(model=MODEL, base_url=base_url, max_retries=0).bind_tools(TOOLS)

    def call_model(state: MessagesState):
        return {"messages": [model.invoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("model", call_model)
    g.add_node("tools", ToolNode(TOOLS))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", tools_condition)
    g.add_edge("tools", "model")
    return g.compile()


def answer(text, services):
    global KV_URL
    KV_URL = services["kv_url"]
    history = messages_from_dict(kv_get("messages", []))
    if not history:
        history = [SystemMessage("You keep the user's todo list with the tools.")]
    result = build(services["openai_base_url"]).invoke({"messages": history + [HumanMessage(text)]})
    # Without the ids LangGraph gives messages at random, so that a replay
    # writes the same state.
    saved = messages_to_dict(result["messages"])
    for m in saved:
        m["data"]["id"] = None
    kv_put("messages", saved)
    return result["messages"][-1].content


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
    # One turn at a time (convo sends them in order): a plain HTTPServer.
    HTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8000"))), Handler).serve_forever()
