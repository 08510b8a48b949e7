"""Finding and re-running in convo's web view, in headless Chromium.

Run by the Rust test `test_serve::browser_find_jump_rerun` (and by hand):

    python find.py CONVO_BIN CHROMIUM WORKDIR [SCREENSHOT_DIR]

A scripted upstream (a small OpenAI-compatible HTTP server in this script
that answers "Echo: " and the last user message) sits behind
`convo serve --upstream`. As a person would, it: searches a word said once
in a 1,000-turn session from the header's search box and lands on that
message, centred and marked, on its timeline; jumps to a turn with the
page's box and to the last page; opens a recorded model call's re-run
page, edits the request, confirms, and sees the new fork with the new
answer. Screenshots at desktop and phone sizes. Exits non-zero with a
message on the first thing that is wrong.
"""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webview import api, drive, fail, start_serve  # noqa: E402


class Upstream(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that echoes the last user message."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        last = [m for m in body.get("messages", []) if m.get("role") == "user"][-1]["content"]
        out = json.dumps({
            "id": "chatcmpl-find", "object": "chat.completion", "created": 1,
            "model": body.get("model", "m"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "Echo: " + last}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def raw(base, path):
    with urllib.request.urlopen(base + path) as r:
        return r.read()


def key(b, k, code=None):
    extra = {"windowsVirtualKeyCode": code, "code": k} if code else {}
    b.send("Input.dispatchKeyEvent", type="keyDown", key=k, text="\r" if k == "Enter" else k, **extra)
    b.send("Input.dispatchKeyEvent", type="keyUp", key=k, **extra)


def loaded(b, cond, what):
    b.wait_for(cond, what)
    b.wait_for("document.readyState === 'complete'", what + " to load")


def main():
    convo, chromium, workdir = sys.argv[1:4]
    shots = sys.argv[4] if len(sys.argv) > 4 else workdir
    up = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    env = dict(os.environ, CONVO_HOME=workdir)
    env.pop("CONVO_STORE", None)
    server, base = start_serve(convo, env, "--upstream", "http://127.0.0.1:%d" % up.server_address[1])
    # Pages kept in the back/forward cache hold their event streams, and
    # Chromium opens six connections per host: this test is about finding,
    # not about that (the live-updates tests are), so the cache is off.
    try:
        drive(chromium, workdir, server, lambda b: run(b, base, shots),
              extra_args=["--disable-features=BackForwardCache"])
    finally:
        up.shutdown()
    print("find: ok")


def run(b, base, shots):
    # A conversation recorded through the proxy, and a long session.
    ask = {"model": "m", "messages": [{"role": "user", "content": "Tell me about the zeppelin museum"}]}
    r = urllib.request.Request(base + "/s/trip/main/v1/chat/completions", data=json.dumps(ask).encode(),
                               method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(r) as res:
        if "Echo: Tell me about the zeppelin museum" not in res.read().decode():
            fail("the proxy did not pass the upstream's answer on")
    trip = api(base, "GET", "/api/v1/sessions?q=trip")["sessions"][0]["id"]
    long = api(base, "POST", "/api/v1/sessions", {"agent": "marathon", "title": "long"})["id"]
    for start in (1, 501):
        lines = []
        for k in range(start, start + 500):
            lines.append({"kind": "invoke", "payload": "question %d" % k})
            said = "answer %d about the quokka" % k if k == 777 else "answer %d" % k
            lines.append({"kind": "complete", "payload": said})
        api(base, "POST", "/api/v1/sessions/%s/branches/main/nodes" % long, lines)

    # Search from the header's box ( / ), Enter.
    b.goto(base + "/")
    key(b, "/")
    if not b.eval("document.activeElement && document.activeElement.id === 'q'"):
        fail("/ does not focus the search box")
    b.send("Input.insertText", text="quokka")
    key(b, "Enter", 13)
    loaded(b, "location.pathname === '/search' && document.querySelectorAll('li.hit').length > 0",
           "the search page with a hit")
    if b.eval("document.querySelectorAll('li.hit').length") != 1:
        fail("expected one message with quokka")
    if b.eval("document.querySelector('li.hit mark').textContent") != "quokka":
        fail("the match is not marked")
    b.screenshot(os.path.join(shots, "webview-search.png"))

    # The hit opens its timeline centred on the message, marked and focused.
    b.eval("document.querySelector('li.hit a.where').click()")
    loaded(b, "location.search.includes('node=')", "the hit's timeline")
    b.wait_for("document.querySelector('article.node.focus') !== null", "the message marked")
    if "about the quokka" not in b.eval("document.querySelector('article.node.focus').textContent"):
        fail("the marked message is not the hit")
    if not b.eval("(() => { const r = document.querySelector('article.node.focus').getBoundingClientRect();"
                  " return r.top >= 0 && r.bottom <= innerHeight; })()"):
        fail("the message is not in view: %s" % b.eval("JSON.stringify([document.querySelector('article.node.focus').getBoundingClientRect(), innerHeight, scrollY, location.hash])"))
    if not b.eval("document.activeElement === document.querySelector('article.node.focus')"):
        fail("the message does not have the focus (j/k go on from it)")
    b.screenshot(os.path.join(shots, "webview-jump.png"))

    # Jump to a turn with the page's box; then the last page, then page 1.
    b.eval("document.getElementById('jump-turn').value = '500'; document.querySelector('form.jump').requestSubmit()")
    loaded(b, "location.search.includes('turn=500')", "turn 500")
    b.wait_for("document.querySelector('article.node.focus') !== null", "turn 500 marked")
    if b.eval("document.querySelector('article.node.focus').textContent").find("question 500") < 0:
        fail("the jump does not land on turn 500's input")
    if b.eval("document.querySelector('nav.pager strong.page').textContent") != "5":
        fail("turn 500 is not shown as on page 5 of 10")
    if b.eval("document.querySelectorAll('nav.pager')[0].querySelectorAll('a.page, strong.page').length") > 9:
        fail("the pager lists every page")
    b.eval("document.querySelector('nav.pager a.last').click()")
    loaded(b, "!location.search.includes('turn=')", "the last page")
    if "answer 1000" not in b.eval("Array.from(document.querySelectorAll('article.node')).pop().textContent"):
        fail("the last page does not end at the head")
    b.eval("Array.from(document.querySelectorAll('nav.pager a.page')).find(a => a.textContent === '1').click()")
    loaded(b, "location.search.includes('cursor=0')", "the first page")
    if "question 1" not in b.eval("document.querySelector('article.node').textContent"):
        fail("page 1 does not start at the first turn")
    b.goto(base + "/sessions/%s?turn=5000" % long)
    if not b.eval("document.querySelector('.jumpnote') !== null"):
        fail("a turn past the end is not said")

    # Re-run a recorded model call with an edited request.
    b.goto(base + "/sessions/" + trip)
    b.wait_for("document.querySelector('article.node.request a.rerun') !== null", "a re-run link on the request")
    req_hash = b.eval("document.querySelector('article.node.request').dataset.hash")
    b.eval("document.querySelector('article.node.request a.rerun').click()")
    loaded(b, "location.pathname.endsWith('/rerun')", "the re-run page")
    recorded = raw(base, "/api/v1/nodes/%s/payload" % req_hash).decode()
    if b.eval("document.getElementById('rerun-body').value") != recorded:
        fail("the re-run box does not hold the recorded bytes exactly")
    b.eval("const t = document.getElementById('rerun-body'); t.value = t.value.replace('zeppelin museum', 'harbour ferry')")
    b.screenshot(os.path.join(shots, "webview-rerun.png"))
    b.events = []
    b.eval("setTimeout(() => document.getElementById('rerun-send').click(), 0)")
    dialog = b.wait_event("Page.javascriptDialogOpening")
    if dialog["params"]["type"] != "confirm":
        fail("the re-run did not ask for confirmation")
    b.send("Page.handleJavaScriptDialog", accept=True)
    loaded(b, "location.search.includes('branch=rerun-1')", "the new fork's page")
    want = "Echo: Tell me about the harbour ferry"
    deadline = time.time() + 20
    while not b.eval("document.body.textContent.includes(%s)" % json.dumps(want)):
        if time.time() > deadline:
            fail("the new answer did not appear on the fork")
        b.pump(1.0)
        if not b.eval("document.body.textContent.includes(%s)" % json.dumps(want)):
            b.goto(base + "/sessions/%s?branch=rerun-1" % trip)
    tl = api(base, "GET", "/api/v1/sessions/%s/branches/rerun-1/timeline" % trip)
    kinds = [n["kind"] for n in tl["nodes"]]
    if "fork" not in kinds or not any(want in (n.get("payload") or "") for n in tl["nodes"]):
        fail("the fork does not hold the new call: %r" % kinds)
    fork = [n for n in tl["nodes"] if n["kind"] == "fork"][0]
    original = api(base, "GET", "/api/v1/nodes/" + req_hash)
    if fork["parent"] != original["parent"]:
        fail("the fork is not made where the request was")
    b.screenshot(os.path.join(shots, "webview-rerun-fork.png"))

    # A phone: the search and re-run pages and a long timeline's pager fit.
    b.send("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=1, mobile=True)
    for name, url in [("webview-search-phone.png", "/search?q=quokka"),
                      ("webview-jump-phone.png", "/sessions/%s?turn=777" % long),
                      ("webview-rerun-phone.png", "/sessions/%s/nodes/%s/rerun" % (trip, req_hash))]:
        b.goto(base + url)
        width = b.eval("document.documentElement.scrollWidth")
        if width > 400:
            fail("%s scrolls sideways on a phone (%s px)" % (url, width))
        b.screenshot(os.path.join(shots, name))


if __name__ == "__main__":
    main()
