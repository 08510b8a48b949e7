"""A turn's waterfall in headless Chromium (DevTools protocol).

Run by the Rust test `test_serve::browser_waterfall` (and by hand):

    python waterfall.py CONVO_BIN CHROMIUM WORKDIR [SCREENSHOT_DIR]

It records one turn with two calls in parallel, a retry of the first that
failed, and a hostile model name, and checks, as a person reading the
session would: the turn's waterfall has one bar per call, the parallel
calls' bars overlap on the time axis, the failed call is marked, the retry
is marked, tokens are on each bar's label, a bar links to its call, and no
injected script runs. Exits non-zero with a message on the first thing
that is wrong.
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


if __name__ == "__main__":
    main()
