"""What the model saw, in headless Chromium (the DevTools driver of webview.py).

Run by the Rust test `test_serve::browser_llm_calls` (and by hand):

    python llmview.py CONVO_BIN CHROMIUM WORKDIR [SCREENSHOT_DIR]

It starts a scripted upstream (OpenAI chat completions, the Responses API,
Anthropic Messages; plain and streamed answers, tool calls, a 429), records
real calls through `convo proxy`, then opens `convo serve` as a person
would and checks: each call reads as a conversation (system, user, image
link, tool calls with their arguments, tool results, thinking), a stream
shows its assembled answer, numbers and duplicate keys are shown as the
bytes hold them, a 47 KB JSON starts collapsed, session totals and list
columns, copy buttons; live updates at the tail only (not on page 1 of
many), rendered by the server, counts updated; ten navigations in one tab
(event streams closed on pagehide, reopened on pageshow). Screenshots at
desktop and phone sizes. Exits non-zero on the first thing that is wrong.
"""

import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webview import api, drive, fail, start_serve  # noqa: E402

BIG = "12345678901234567890123"

CHAT_TOOL = ('{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-2024-08-06",'
             '"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":'
             '[{"id":"call_w1","type":"function","function":{"name":"get_weather","arguments":'
             '"{\\"city\\":\\"Paris\\",\\"station\\":' + BIG + '}"}}]},"finish_reason":"tool_calls"}],'
             '"usage":{"prompt_tokens":1200,"completion_tokens":30,"total_tokens":1230},'
             '"system_fingerprint":"fp_1","system_fingerprint":"fp_2","trace":' + BIG + '}')


def chat_stream():
    words = ["It is ", "18 degrees ", "in Paris ", "(streamed)."]
    out = ""
    for i, w in enumerate(words):
        delta = {"content": w} if i else {"role": "assistant", "content": w}
        out += "data: " + json.dumps({"id": "chatcmpl-2", "object": "chat.completion.chunk",
                                      "model": "gpt-4o-2024-08-06",
                                      "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}) + "\n\n"
    out += "data: " + json.dumps({"id": "chatcmpl-2", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}) + "\n\n"
    out += "data: " + json.dumps({"id": "chatcmpl-2", "choices": [], "usage": {"prompt_tokens": 1300, "completion_tokens": 12}}) + "\n\n"
    return out + "data: [DONE]\n\n"


RESPONSES = json.dumps({
    "id": "resp_1", "object": "response", "model": "gpt-4o-mini", "status": "completed",
    "output": [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Need the forecast tool."}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_r1", "name": "forecast",
         "arguments": "{\"days\":3}"},
    ],
    "usage": {"input_tokens": 500, "output_tokens": 40},
})


def anthropic_stream():
    evs = [
        ("message_start", {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                                                "model": "claude-sonnet-4-5", "content": [],
                                                                "usage": {"input_tokens": 800, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "The user wants a sum."}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_9", "name": "calculator", "input": {}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"expr\": \"2+"}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "2\"}"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 25}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join("event: %s\ndata: %s\n\n" % (e, json.dumps(d)) for e, d in evs)


class Upstream(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        stream = body.get("stream") is True
        if self.path.endswith("/chat/completions"):
            if body.get("model") == "gpt-busy":
                return self.send(429, "application/json", '{"error":{"message":"Rate limit reached","type":"rate_limit"}}')
            if stream:
                return self.send(200, "text/event-stream", chat_stream())
            return self.send(200, "application/json", CHAT_TOOL)
        if self.path.endswith("/responses"):
            return self.send(200, "application/json", RESPONSES)
        if self.path.endswith("/messages"):
            return self.send(200, "text/event-stream", anthropic_stream())
        self.send(404, "application/json", '{"error":{"message":"no such route"}}')

    def send(self, status, ct, text):
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", ct)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def post(url, body, headers=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers=dict({"Content-Type": "application/json",
                                               "Authorization": "Bearer sk-test"}, **(headers or {})))
    try:
        with urllib.request.urlopen(req) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        return e.read()


def record(convo, env):
    up = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    base_up = "http://127.0.0.1:%d" % up.server_address[1]
    proxy = subprocess.Popen([convo, "proxy", "--listen", "127.0.0.1:0", "--quiet",
                              "--upstream", base_up + "/v1", "--anthropic-upstream", base_up],
                             env=env, stdout=subprocess.PIPE, text=True)
    try:
        p = proxy.stdout.readline().strip().rstrip("/")
        if not p.startswith("http://"):
            fail("convo proxy printed no URL")
        v1 = p + "/s/llm-calls/main/v1"
        big_tool_result = json.dumps({"rows": [{"i": i, "name": "row %05d" % i, "ok": True} for i in range(1050)]})
        if not 46000 <= len(big_tool_result) <= 49000:
            fail("the big JSON is %d bytes" % len(big_tool_result))
        msgs = [
            {"role": "system", "content": "You are a weather bot. Answer briefly."},
            {"role": "user", "content": [{"type": "text", "text": "What is the weather in Paris?"},
                                         {"type": "image_url", "image_url": {"url": "https://example.com/paris.png"}}]},
        ]
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
        post(v1 + "/chat/completions", {"model": "gpt-4o", "messages": msgs, "tools": tools})
        msgs2 = msgs + [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_w1", "content": big_tool_result},
        ]
        post(v1 + "/chat/completions", {"model": "gpt-4o", "messages": msgs2, "stream": True})
        post(v1 + "/responses", {"model": "gpt-4o-mini", "instructions": "Plan with tools.",
                                 "input": [{"role": "user", "content": "Forecast for three days?"}],
                                 "tools": [{"type": "function", "name": "forecast"}]})
        post(v1 + "/messages", {"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": True,
                                "system": [{"type": "text", "text": "You add numbers."}],
                                "messages": [{"role": "user", "content": "What is 2+2?"}]},
             {"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-test"})
        post(v1 + "/chat/completions", {"model": "gpt-busy", "messages": [{"role": "user", "content": "hello?"}]})
    finally:
        proxy.terminate()
        proxy.wait()
        up.shutdown()


def main():
    convo, chromium, workdir = sys.argv[1:4]
    shots = sys.argv[4] if len(sys.argv) > 4 else workdir
    env = dict(os.environ, CONVO_HOME=workdir)
    env.pop("CONVO_STORE", None)
    env.pop("CONVO_PRICES", None)
    record(convo, env)
    server, base = start_serve(convo, env)
    drive(chromium, workdir, server, lambda b: run(b, base, shots))
    print("llmview: ok")


def has(b, sel, text):
    return b.eval("Array.from(document.querySelectorAll(%s)).some(e => e.textContent.includes(%s))"
                  % (json.dumps(sel), json.dumps(text)))


def run(b, base, shots):
    sid = [s for s in api(base, "GET", "/api/v1/sessions")["sessions"] if s["title"] == "llm-calls"]
    if len(sid) != 1:
        fail("the proxy did not record the llm-calls session")
    sid = sid[0]["id"]

    # The list: last activity, turns, tokens, cost, errors.
    b.goto(base + "/")
    heads = b.eval("Array.from(document.querySelectorAll('table.sessions th')).map(t => t.textContent)")
    for h in ["Last activity", "Turns", "Tokens in / out", "Cost", "Errors"]:
        if h not in heads:
            fail("the list has no %r column: %r" % (h, heads))
    row = b.eval("Array.from(document.querySelectorAll('table.sessions tbody tr')).find(r => r.textContent.includes('llm-calls')).textContent")
    if "3800 / 107" not in row:
        fail("the list row does not sum the tokens: %r" % row)

    b.goto(base + "/sessions/" + sid)
    b.wait_for("document.readyState === 'complete'", "the session page")

    # Session totals: 5 calls, tokens in/out, a cost, the 429 as an error.
    t = b.eval("[document.getElementById('t-calls').textContent, document.getElementById('t-tin').textContent, document.getElementById('t-tout').textContent, document.getElementById('t-errors').textContent, document.getElementById('t-cost').textContent]")
    if t[:4] != ["5", "3800", "107", "1"]:
        fail("session totals: %r" % t)
    if t[4] in ("$0", ""):
        fail("no cost from the price table: %r" % t)

    # The chat call as a conversation: system, user with an image link, the tool call and its arguments.
    if not has(b, "article.node.request .msg.r-system", "You are a weather bot"):
        fail("the system prompt is not shown as a system message")
    if not b.eval("!!document.querySelector('article.node.request .msg.r-user a[href=\"https://example.com/paris.png\"]')"):
        fail("the user's image is not a link")
    if not has(b, "article.node.response .toolcall", "get_weather"):
        fail("the assistant's tool call is not shown")
    if not has(b, "article.node.response .toolcall .jn", BIG):
        fail("the tool call's big number is not shown as written")
    if not has(b, "article.node.request .toolresult", "row 01049"):
        fail("the tool result is not shown")
    # The stream, from its assembled form.
    if not has(b, "article.node.response .msg.r-assistant", "It is 18 degrees in Paris (streamed)."):
        fail("the streamed answer is not assembled")
    # Responses API: instructions as system, reasoning as thinking, the function call.
    if not has(b, "article.node.request .msg.r-system", "Plan with tools."):
        fail("Responses instructions are not the system message")
    if not has(b, "article.node.response details.thinking", "Need the forecast tool."):
        fail("Responses reasoning is not shown as thinking")
    if not has(b, "article.node.response .toolcall", "forecast"):
        fail("the Responses function call is not shown")
    # Anthropic stream: thinking and tool use assembled.
    if not has(b, "article.node.response details.thinking", "The user wants a sum."):
        fail("Anthropic thinking is not shown")
    if not has(b, "article.node.response .toolcall", "calculator"):
        fail("Anthropic tool use is not shown")
    if not has(b, "article.node.response .callhead", "HTTP 429"):
        fail("the failed call does not show its status")
    if not has(b, "article.node.response .msg.r-error", "Rate limit reached"):
        fail("the failed call does not show its error")

    # Raw bytes: exact numbers, duplicate keys, a 47 KB JSON collapsed.
    if not has(b, "article.node.response details.raw .jn", BIG):
        fail("the raw response does not show %s" % BIG)
    dups = b.eval("Array.from(document.querySelectorAll('.jv-l.dup')).map(e => e.textContent)")
    if not any("system_fingerprint" in d and "duplicate key" in d for d in dups):
        fail("the duplicate key is not shown: %r" % dups)
    big = b.eval("""(() => { const s = Array.from(document.querySelectorAll('details.jv-c')).find(d =>
        d.querySelector(':scope > summary .jv-n') && /1050 items · 4[5-8]\\.\\d KB/.test(d.querySelector(':scope > summary .jv-n').textContent));
        return s ? [s.open, s.querySelector(':scope > summary').textContent] : null; })()""")
    if big is None:
        fail("no 47 KB array in the tool result's JSON")
    if big[0]:
        fail("the 47 KB JSON is expanded: %r" % big)
    # Open the context window of the streamed call and its raw JSON; copy it.
    n = b.eval("""(() => { const d = Array.from(document.querySelectorAll('article.node.request details.context'))[1];
        d.open = true; return d.querySelectorAll('.msg').length; })()""")
    if n != 4:
        fail("the second call's context window has %r messages, not 4" % n)
    b.eval("document.querySelector('article.node.request details.raw').open = true")
    b.eval("document.querySelector('article.node.request details.raw .jv button.copy').click()")
    b.wait_for("+(document.querySelector('article.node.request details.raw .jv').dataset.copied || 0) > 100", "the copy button")
    b.eval("document.querySelector('article.node.request details.raw').open = false")
    b.eval("document.querySelectorAll('article.node.response')[0].scrollIntoView()")
    b.screenshot(os.path.join(shots, "llmview-session.png"))
    b.eval("window.scrollTo(0, 0)")

    # The node page: the context window open, the raw bytes a link away.
    href = b.eval("document.querySelector('article.node.request a.hash').href")
    b.goto(href)
    if not b.eval("document.querySelector('details.context').open && document.querySelectorAll('details.context .msg').length === 2"):
        fail("the request's page does not open its context window")
    if not b.eval("!!document.querySelector('a[href$=\"/payload\"]')"):
        fail("no link to the raw bytes")

    # Phone: no sideways scroll.
    b.send("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=1, mobile=True)
    b.goto(base + "/sessions/" + sid)
    width = b.eval("document.documentElement.scrollWidth")
    if width > 400:
        fail("the session page scrolls sideways on a phone (%s px)" % width)
    b.screenshot(os.path.join(shots, "llmview-phone.png"))
    b.send("Emulation.clearDeviceMetricsOverride")

    live(b, base)


def live(b, base):
    # A long timeline: 130 turns, more than a page of 200 nodes.
    lid = api(base, "POST", "/api/v1/sessions", {"agent": "live", "title": "live"})["id"]
    nodes = []
    for i in range(130):
        nodes += [{"kind": "invoke", "payload": "question %d" % i}, {"kind": "complete", "payload": "answer %d" % i}]
    api(base, "POST", "/api/v1/sessions/%s/branches/main/nodes" % lid, nodes)
    url = base + "/sessions/" + lid

    # Ten navigations in one tab, going back each time (pages in the
    # back/forward cache must not keep their event streams open).
    for i in range(10):
        b.goto(url + ("?cursor=0" if i % 2 else ""))
        b.wait_for("document.getElementById('session').dataset.live === 'open'", "the event stream %d" % i)
        b.goto(base + "/")
    b.eval("history.back()")
    b.wait_for("location.pathname.startsWith('/sessions/') && document.getElementById('session') && document.getElementById('session').dataset.live === 'open'",
               "the event stream to reopen after going back")

    # Page 1 of many: a new node is counted, not appended after turn 100.
    b.goto(url + "?cursor=0")
    b.wait_for("document.getElementById('session').dataset.live === 'open'", "the stream on page 1")
    b.pump(0.3)
    before = b.eval("document.querySelectorAll('article.node').length")
    api(base, "POST", "/api/v1/sessions/%s/branches/main/nodes" % lid,
        [{"kind": "invoke", "payload": "live **question**"}, {"kind": "complete", "payload": "live answer"}])
    b.wait_for("!document.getElementById('live').hidden", "the notice on page 1")
    # Both nodes arrive as separate events; the count follows each.
    b.wait_for("document.getElementById('c-nodes').textContent === '262'", "the node count on page 1 (262)")
    if b.eval("document.querySelectorAll('article.node').length") != before:
        fail("a live node was appended to page 1")

    # The tail: appended as the server renders it (Markdown, turn heading), counts updated.
    b.goto(url)
    b.wait_for("document.getElementById('session').dataset.live === 'open'", "the stream at the tail")
    b.pump(0.3)
    turns = int(b.eval("document.getElementById('c-turns').textContent"))
    api(base, "POST", "/api/v1/sessions/%s/branches/main/nodes" % lid,
        [{"kind": "invoke", "payload": "tail **question**"}, {"kind": "complete", "payload": "tail answer"}])
    b.wait_for("Array.from(document.querySelectorAll('article.node.fresh')).some(a => a.textContent.includes('tail answer'))",
               "the new turn at the tail")
    if not b.eval("Array.from(document.querySelectorAll('article.node.fresh .md strong')).some(s => s.textContent === 'question')"):
        fail("the live node is not rendered as the server renders it (Markdown)")
    if not b.eval("!!document.getElementById('turn-%d')" % (turns + 1)):
        fail("the live turn has no heading")
    if b.eval("document.getElementById('c-turns').textContent") != str(turns + 1):
        fail("the turn count was not updated")
    b.wait_for("document.getElementById('c-nodes').textContent === '264'", "the node count at the tail (264)")

    # The graph follows: a fork made elsewhere is drawn without a reload,
    # and so is a node appended to it.
    drawn = int(b.eval("document.getElementById('timelines').dataset.drawn || '0'"))
    at = api(base, "GET", "/api/v1/sessions/%s/branches/main/timeline?limit=1" % lid, None)
    at = at["nodes"][0]["hash"]
    api(base, "POST", "/api/v1/sessions/%s/fork" % lid, {"from": at, "branch": "side-live"})
    api(base, "POST", "/api/v1/sessions/%s/branches/side-live/nodes" % lid,
        [{"kind": "invoke", "payload": "on the side"}])
    b.wait_for("Array.from(document.querySelectorAll('#timelines figure.graph text.label tspan.u')).some(t => t.textContent === 'side-live')",
               "the fork drawn in the graph")
    b.wait_for("Array.from(document.querySelectorAll('#timelines nav.timelines a')).some(a => a.textContent === 'side-live')",
               "the fork listed with the timelines")
    if int(b.eval("document.getElementById('timelines').dataset.drawn || '0'")) <= drawn:
        fail("the graph was not redrawn")
    if not b.eval("document.getElementById('live').textContent.includes('other timelines')"):
        fail("the notice does not say a node arrived on another timeline")
    # The page read is still the tail of main, nothing of the fork in it.
    if b.eval("Array.from(document.querySelectorAll('article.node')).some(a => a.textContent.includes('on the side'))"):
        fail("a node of another timeline was appended to this one")


if __name__ == "__main__":
    main()
