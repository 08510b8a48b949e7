"""Drives convo's web view in headless Chromium through the DevTools protocol.

Run by the Rust test `test_serve::browser_webview` (and by hand):

    python webview.py CONVO_BIN CHROMIUM WORKDIR [SCREENSHOT_DIR]

It records the demo session, starts `convo serve` on a free port, and as a
person would: opens the session, checks the timeline graph, opens a turn,
forks from a node (answering the page's prompt), adds a turn through the
API and waits for it to appear live, promotes the fork (confirming), checks
the sealed timeline, checks that hostile payloads never run, navigates by
keyboard, and looks at the page on a phone-sized screen. Exits non-zero
with a message on the first thing that is wrong.
"""

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import websocket  # websocket-client, from PyPI


def fail(msg):
    print("webview: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


class Browser:
    def __init__(self, chromium, workdir, extra_args=()):
        self.profile = os.path.join(workdir, "chromium-profile")
        shutil.rmtree(self.profile, ignore_errors=True)
        os.makedirs(self.profile)
        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--remote-debugging-port=0",
             "--remote-allow-origins=*",
             "--user-data-dir=" + self.profile, "--window-size=1200,900", *extra_args,
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        for _ in range(300):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.1)
        else:
            fail("chromium did not start")
        port = open(port_file).read().split()[0]
        targets = json.load(urllib.request.urlopen("http://127.0.0.1:%s/json/list" % port))
        page = [t for t in targets if t.get("type") == "page"][0]
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30)
        self.next_id = 0
        self.events = []
        self.send("Page.enable")
        self.send("Runtime.enable")

    def send(self, method, soft=False, **params):
        """Sends one DevTools command; with `soft`, an error is returned
        (as {"error": …}) instead of failing the test."""
        self.next_id += 1
        my = self.next_id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my:
                if "error" in msg:
                    if soft:
                        return {"error": msg["error"]}
                    fail("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def pump(self, seconds):
        """Collects events for a while."""
        self.ws.settimeout(seconds)
        try:
            while True:
                msg = json.loads(self.ws.recv())
                if "method" in msg:
                    self.events.append(msg)
        except websocket.WebSocketTimeoutException:
            pass
        finally:
            self.ws.settimeout(30)

    def wait_event(self, name, timeout=15):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for i, e in enumerate(self.events):
                if e["method"] == name:
                    return self.events.pop(i)
            self.pump(0.2)
        fail("no %s within %ss" % (name, timeout))

    def eval(self, expr):
        r = self.send("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            fail("script error in %r: %s" % (expr, r["exceptionDetails"]))
        return r.get("result", {}).get("value")

    def goto(self, url):
        self.events = [e for e in self.events if e["method"] != "Page.loadEventFired"]
        self.send("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def wait_for(self, expr, what, timeout=15):
        deadline = time.time() + timeout
        while time.time() < deadline:
            r = self.send("Runtime.evaluate", soft=True, expression=expr, returnByValue=True,
                          awaitPromise=True)
            # A page navigating away as it is asked (a click that loads the
            # next page) is "not yet", not a failure: ask the next one.
            if "error" in r and "navigated or closed" not in str(r["error"]):
                fail("Runtime.evaluate: %s" % r["error"])
            if "exceptionDetails" in r:
                fail("script error in %r: %s" % (expr, r["exceptionDetails"]))
            if r.get("result", {}).get("value"):
                return
            self.pump(0.1)
        fail("timed out waiting for " + what)

    def screenshot(self, path):
        data = self.send("Page.captureScreenshot", format="png")["data"]
        import base64
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.kill()
            self.proc.wait()


def api(base, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def start_serve(convo, env, *args):
    """`convo serve` on a free loopback port: the process and its base URL."""
    server = subprocess.Popen([convo, "serve", "--listen", "127.0.0.1:0", "--quiet", *args],
                              env=env, stdout=subprocess.PIPE, text=True)
    base = server.stdout.readline().strip().rstrip("/")
    if not base.startswith("http://"):
        fail("convo serve printed no URL")
    return server, base


def drive(chromium, workdir, server, fn, extra_args=()):
    """Runs fn(browser) in a fresh headless Chromium, then stops it and the server."""
    b = Browser(chromium, workdir, extra_args)
    try:
        fn(b)
    finally:
        b.close()
        server.terminate()
        server.wait()


def main():
    convo, chromium, workdir = sys.argv[1:4]
    shots = sys.argv[4] if len(sys.argv) > 4 else workdir
    env = dict(os.environ, CONVO_HOME=workdir)
    env.pop("CONVO_STORE", None)
    sid = subprocess.run([convo, "demo"], env=env, check=True, capture_output=True,
                         text=True).stdout.strip()
    server, base = start_serve(convo, env)
    drive(chromium, workdir, server, lambda b: run(b, base, sid, shots))
    print("webview: ok")


def run(b, base, sid, shots):
    # The sessions list links to the demo session.
    b.goto(base + "/")
    if not b.eval("document.querySelectorAll('table.sessions tbody tr').length === 1"):
        fail("the sessions list does not show the demo session")
    b.eval("document.querySelector('table.sessions tbody a').click()")
    b.wait_for("location.pathname.startsWith('/sessions/')", "the session page")

    # Its graph: main and the sealed broken-… timeline, with a fork point.
    b.wait_for("document.readyState === 'complete'", "the page to load")
    lanes = b.eval("document.querySelectorAll('figure.graph line.lane').length")
    if lanes != 2:
        fail("expected 2 timelines in the graph, saw %r" % lanes)
    if not b.eval("document.querySelectorAll('figure.graph line.lane.sealed').length === 1"):
        fail("the sealed timeline is not drawn as sealed")
    if not b.eval("document.querySelectorAll('figure.graph circle.forkpoint').length === 1"):
        fail("no fork point in the graph")
    paint = b.eval("(performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint') || {}).startTime || 0")
    print("webview: demo session first contentful paint %.0f ms" % paint)
    b.screenshot(os.path.join(shots, "webview-session.png"))

    # Open a turn (its first node) and come back.
    b.eval("document.querySelector('article.node.invoke a.hash').click()")
    b.wait_for("location.pathname.includes('/nodes/')", "the node page")
    b.wait_for("document.readyState === 'complete'", "the node page to load")
    if "invoke" not in b.eval("document.querySelector('h1').textContent"):
        fail("the node page does not show the invoke")
    if not b.eval("document.querySelector('section.state') !== null"):
        fail("the node page does not show the state as of the node")
    b.goto(base + "/sessions/" + sid)

    # Fork from the first complete, answering the prompt.
    b.eval("setTimeout(() => document.querySelector('article.node.complete button.fork').click(), 0)")
    dialog = b.wait_event("Page.javascriptDialogOpening")
    if dialog["params"]["type"] != "prompt":
        fail("fork did not ask for a name")
    b.send("Page.handleJavaScriptDialog", accept=True, promptText="from-browser")
    b.wait_for("location.search.includes('branch=from-browser')", "the new timeline's page")
    b.wait_for("document.readyState === 'complete'", "the fork page to load")
    if b.eval("document.querySelectorAll('figure.graph line.lane').length") != 3:
        fail("the graph does not show the new timeline")

    # A turn added through the API appears live.
    b.pump(0.5)
    api(base, "POST", "/api/v1/sessions/%s/branches/from-browser/nodes" % sid,
        [{"kind": "invoke", "payload": "Live question from the API"},
         {"kind": "complete", "payload": "Live answer <b>bold?</b>"}])
    b.wait_for("Array.from(document.querySelectorAll('article.node')).some(a => a.textContent.includes('Live answer <b>bold?</b>'))",
               "the new turn to appear live")
    if b.eval("document.querySelector('#turns b') !== null"):
        fail("a live payload became markup")

    # Keyboard: j focuses a message.
    for key in ["j", "j"]:
        b.send("Input.dispatchKeyEvent", type="keyDown", key=key, text=key)
        b.send("Input.dispatchKeyEvent", type="keyUp", key=key)
    if not b.eval("document.activeElement && document.activeElement.classList.contains('node')"):
        fail("j does not move the focus to a message")

    # Promote, confirming.
    b.eval("setTimeout(() => document.getElementById('promote').click(), 0)")
    dialog = b.wait_event("Page.javascriptDialogOpening")
    if dialog["params"]["type"] != "confirm":
        fail("promote did not ask for confirmation")
    b.send("Page.handleJavaScriptDialog", accept=True)
    b.wait_for("location.search === '' && location.pathname.startsWith('/sessions/')", "main after the promote")
    b.wait_for("document.readyState === 'complete'", "main to load")
    if not b.eval("Array.from(document.querySelectorAll('article.node')).some(a => a.textContent.includes('Live question from the API'))"):
        fail("main does not hold the promoted timeline")
    sealed = b.eval("Array.from(document.querySelectorAll('nav.timelines a')).filter(a => a.textContent.includes('sealed')).map(a => a.href)")
    if len(sealed) != 2:
        fail("expected two sealed timelines after two promotes, saw %r" % sealed)
    b.goto(sealed[-1])
    if not b.eval("document.querySelector('p.notice') !== null && document.getElementById('promote') === null"):
        fail("a sealed timeline does not say it is sealed, or offers a promote")

    # Hostile payloads never run.
    s2 = api(base, "POST", "/api/v1/sessions", {"agent": "<img src=x onerror=\"window.__pwned=1\">",
                                                 "title": "<script>window.__pwned=2</script>"})["id"]
    api(base, "POST", "/api/v1/sessions/%s/branches/main/nodes" % s2,
        [{"kind": "invoke", "payload": "<img src=x onerror=\"window.__pwned=3;alert(3)\"> [x](javascript:window.__pwned=4)"},
         {"kind": "complete", "payload": "<svg onload=\"window.__pwned=5\"></svg><iframe src=javascript:alert(6)>"}])
    b.events = []
    for url in [base + "/", base + "/sessions/" + s2]:
        b.goto(url)
        b.pump(0.5)
        if b.eval("typeof window.__pwned !== 'undefined'"):
            fail("a payload ran on " + url)
        if any(e["method"] == "Page.javascriptDialogOpening" for e in b.events):
            fail("a payload opened a dialog on " + url)
    b.eval("Array.from(document.querySelectorAll('a[href^=\"#\"]')).forEach(a => a.click())")
    if b.eval("typeof window.__pwned !== 'undefined'"):
        fail("a payload link ran")

    # A phone-sized screen: no sideways scrolling.
    b.send("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=1, mobile=True)
    b.goto(base + "/sessions/" + sid)
    width = b.eval("document.documentElement.scrollWidth")
    if width > 400:
        fail("the session page scrolls sideways on a phone (%s px)" % width)
    b.screenshot(os.path.join(shots, "webview-phone.png"))


if __name__ == "__main__":
    main()
