"""A turn's waterfall in headless Chromium (DevTools protocol).

Run by the Rust test `test_serve::browser_waterfall` (and by hand):

    python waterfall.py CONVO_BIN CHROMIUM WORKDIR [SCREENSHOT_DIR]

It records one turn with two calls in parallel, a retry of the first that
failed, and a hostile model name, and checks, as a person reading the
session would: the turn's waterfall has one bar per call, the parallel
calls' bars overlap on the time axis, the failed call is marked, the retry
is marked, tokens are on each bar's label, a bar links to its call, and no
injected script runs. Then a turn whose first call started a subagent
(a timeline forked at that call, its first node linked to it as the
proxy records one): the subagent's calls are drawn nested right under the
call that started it, on the same axis, labelled, each linking to its node
on the subagent's timeline. Exits non-zero with a message on the first
thing that is wrong.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webview import api, drive, fail, start_serve  # noqa: E402  (the one DevTools driver)

XSS = "<img src=x onerror=\"window.__x=1\">"


def main():
    convo, chromium, workdir = sys.argv[1:4]
    shots = sys.argv[4] if len(sys.argv) > 4 else workdir
    env = dict(os.environ, CONVO_HOME=workdir)
    env.pop("CONVO_STORE", None)
    server, base = start_serve(convo, env)
    drive(chromium, workdir, server, lambda b: run(b, base, shots))
    print("waterfall: ok")


def response(model, tokens, latency, status=200):
    body = {"id": "c", "object": "chat.completion", "model": model, "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": tokens, "completion_tokens": 5}}
    if status >= 400:
        body = {"error": {"message": "overloaded"}}
    return json.dumps(body), {"status": status, "model": model, "latency_ms": latency,
                              "usage": {"prompt_tokens": tokens, "completion_tokens": 5}}


def run(b, base, shots):
    sid = api(base, "POST", "/api/v1/sessions", {"agent": "bot", "title": "parallel"})["id"]
    ask = lambda q: json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": q}]})  # noqa: E731
    r1, d1 = response("gpt-4o", 120, 900)
    r2, d2 = response(XSS, 340, 700)
    r3, d3 = response("gpt-4o", 120, 200, status=529)
    api(base, "POST", "/api/v1/sessions/%s/branches/main/nodes" % sid, [
        {"kind": "invoke", "payload": "Compare Paris and Lyon"},
        {"kind": "request", "payload": ask("Paris?")},
        {"kind": "request", "payload": ask("Lyon?")},
        {"kind": "response", "payload": r1, "sequence": 1, "diagnostics": d1},
        {"kind": "response", "payload": r2, "sequence": 2, "diagnostics": d2},
        {"kind": "request", "payload": ask("Paris?")},
        {"kind": "response", "payload": r3, "sequence": 3, "diagnostics": d3},
        {"kind": "complete", "payload": "Both are nice."},
    ])
    b.goto(base + "/sessions/" + sid)
    bars = json.loads(b.eval("""JSON.stringify(Array.from(document.querySelectorAll('#turn-1 + figure.waterfall rect.bar')).map(r => ({
        x: +r.getAttribute('x'), w: +r.getAttribute('width'), cls: r.getAttribute('class'),
        label: r.parentNode.querySelector('text').textContent, href: r.parentNode.getAttribute('href')})))"""))
    if len(bars) != 3:
        fail("the turn's waterfall does not show its 3 calls: %r" % bars)
    a, c = bars[0], bars[1]
    if not (a["x"] < c["x"] + c["w"] and c["x"] < a["x"] + a["w"]):
        fail("the parallel calls do not overlap on the time axis: %r" % bars)
    if "bad" not in bars[2]["cls"]:
        fail("the failed call is not marked: %r" % bars[2])
    if "↻" not in bars[2]["label"]:
        fail("the retry is not marked: %r" % bars[2])
    if "120/5 tok" not in a["label"] or "340/5 tok" not in c["label"]:
        fail("the bars do not carry their tokens: %r" % bars)
    if "<img" not in c["label"]:
        fail("the hostile model name is not shown as text: %r" % c["label"])
    if b.eval("typeof window.__x") != "undefined":
        fail("a hostile model name ran a script")
    b.screenshot(os.path.join(shots, "waterfall.png"))
    b.eval("document.querySelector('#turn-1 + figure.waterfall a').dispatchEvent(new MouseEvent('click', {bubbles: true}))")
    b.wait_for("location.hash === %r" % bars[0]["href"], "the bar's link to its call")
    subagent(b, base, shots)


def subagent(b, base, shots):
    sid = api(base, "POST", "/api/v1/sessions", {"agent": "bot", "title": "delegating"})["id"]
    ask = lambda q: json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": q}]})  # noqa: E731
    r1, d1 = response("gpt-4o", 100, 400)
    r2, d2 = response("gpt-4o", 150, 300)
    main = api(base, "POST", "/api/v1/sessions/%s/branches/main/nodes" % sid, [
        {"kind": "invoke", "payload": "Delegate the file listing"},
        {"kind": "request", "payload": ask("delegate")},
        {"kind": "response", "payload": r1, "sequence": 1, "diagnostics": d1},
        {"kind": "request", "payload": ask("summarize")},
        {"kind": "response", "payload": r2, "sequence": 2, "diagnostics": d2},
        {"kind": "complete", "payload": "Done."},
    ])
    starter = main["nodes"][2]["hash"]
    api(base, "POST", "/api/v1/sessions/%s/fork" % sid, {"from": starter, "branch": "agent-1"})
    s1, e1 = response("sub-model", 11, 120)
    s2, e2 = response(XSS, 22, 80)
    link = {"subagent": {"tool": "Agent", "tool_call_id": "call_1"}}
    api(base, "POST", "/api/v1/sessions/%s/branches/agent-1/nodes" % sid, [
        {"kind": "invoke", "payload": "list the files", "diagnostics": link},
        {"kind": "request", "payload": ask("ls")},
        {"kind": "response", "payload": s1, "sequence": 1, "diagnostics": e1},
        {"kind": "request", "payload": ask("ls -a")},
        {"kind": "response", "payload": s2, "sequence": 2, "diagnostics": e2},
        {"kind": "complete", "payload": "3 files"},
    ])
    b.goto(base + "/sessions/" + sid)
    rows = json.loads(b.eval("""JSON.stringify(Array.from(document.querySelectorAll('#turn-1 + figure.waterfall svg > a')).map(a => ({
        cls: a.getAttribute('class'), href: a.getAttribute('href'), branch: a.getAttribute('data-branch'),
        label: a.querySelector('text').textContent, y: +a.querySelector('rect').getAttribute('y'),
        x: +a.querySelector('rect').getAttribute('x'), w: +a.querySelector('rect').getAttribute('width')})))"""))
    if [r["cls"] for r in rows] != ["call", "nested", "nested", "call"]:
        fail("the subagent's two calls are not nested right under the call that started it: %r" % rows)
    if rows[0]["href"] != "#n-" + starter:
        fail("the first row is not the call that started the subagent: %r" % rows)
    if any(r["y"] >= rows[i + 1]["y"] for i, r in enumerate(rows[:-1])):
        fail("the rows are not drawn top to bottom: %r" % rows)
    sub = rows[1:3]
    if any(r["branch"] != "agent-1" or "branch=agent-1" not in r["href"] for r in sub):
        fail("a nested bar does not link to the subagent's timeline: %r" % sub)
    if not (sub[0]["label"].startswith("↳") and "sub-model" in sub[0]["label"] and "11/5 tok" in sub[0]["label"]):
        fail("the nested bar does not say whose call it is: %r" % sub[0])
    if "<img" not in sub[1]["label"] or b.eval("typeof window.__x") != "undefined":
        fail("a hostile model name in a subagent's call is not inert: %r" % sub[1])
    if sub[0]["x"] <= rows[0]["x"]:
        fail("the subagent's call is not after the call that started it on the time axis: %r" % rows)
    caption = b.eval("document.querySelector('#turn-1 + figure.waterfall figcaption').textContent")
    if "2 model calls" not in caption or "2 of subagents" not in caption:
        fail("the caption does not count the subagent's calls apart: %r" % caption)
    b.screenshot(os.path.join(shots, "waterfall-subagent.png"))
    b.eval("document.querySelector('#turn-1 + figure.waterfall a.nested').dispatchEvent(new MouseEvent('click', {bubbles: true}))")
    b.wait_for("location.search.indexOf('branch=agent-1') >= 0", "the nested bar's link to the subagent's timeline")


if __name__ == "__main__":
    main()
