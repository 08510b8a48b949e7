"""A DNS-rebinding attack on `convo serve` in headless Chromium.

Run by the Rust test `test_security::browser_dns_rebinding_is_refused`:

    python rebind.py CONVO_BIN CHROMIUM WORKDIR

Chromium resolves attacker.example to 127.0.0.1 (--host-resolver-rules, as a
rebinding DNS server would after its first answer). The attacker's page is
first served on a free port by a server of the attacker's; then that server
goes away and `convo serve` listens on the same port, so the page's
same-origin requests (`http://attacker.example:PORT/...`) now reach convo,
exactly as after a rebinding. The page reads the session list, the OpenAPI
document and the event stream, and tries to create a session, append,
retitle and set state. Every request must get convo's 403 error document
(not a network error: the server was reached) and nothing may be written.
Exits non-zero with a message on the first thing that is wrong.
"""

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webview import Browser, fail  # noqa: E402

ATTACK_PAGE = b"""<!doctype html><html><head><meta charset="utf-8"><title>cute cats</title></head>
<body><p>cats</p><script>
window.ready = true;
window.attack = async function (sid) {
  const out = [];
  const json = {"Content-Type": "application/json"};
  const tries = [
    ["GET", "/api/v1/sessions"],
    ["GET", "/openapi.json"],
    ["GET", "/"],
    ["GET", "/api/v1/sessions/" + sid + "/branches/main/timeline"],
    ["POST", "/api/v1/sessions", JSON.stringify({agent: "attacker"})],
    ["POST", "/api/v1/sessions/" + sid + "/branches/main/nodes",
     JSON.stringify({kind: "invoke", payload: "pwned"})],
    ["PATCH", "/api/v1/sessions/" + sid, JSON.stringify({title: "pwned"})],
    ["PUT", "/api/v1/sessions/" + sid + "/branches/main/state/owned", "pwned"],
    ["POST", "/api/v1/import?format=convo", "{}"],
  ];
  for (const [method, path, body] of tries) {
    try {
      const r = await fetch(path, {method, body, headers: body ? json : {}});
      let kind = null;
      try { kind = (await r.json()).error.kind; } catch (e) {}
      out.push({method, path, status: r.status, kind});
    } catch (e) {
      out.push({method, path, status: 0, error: String(e)});
    }
  }
  const events = await new Promise((resolve) => {
    const es = new EventSource("/api/v1/events?after=0");
    let got = 0;
    es.onmessage = () => { got += 1; };
    es.addEventListener("node", () => { got += 1; });
    es.onerror = () => { es.close(); resolve({error: true, got}); };
    setTimeout(() => { es.close(); resolve({error: false, got}); }, 5000);
  });
  return {requests: out, events};
};
</script></body></html>
"""


class Attacker(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(ATTACK_PAGE)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(ATTACK_PAGE)

    def log_message(self, *args):
        pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(base, path):
    with urllib.request.urlopen(base + path) as r:
        return json.loads(r.read())


def main():
    convo, chromium, workdir = sys.argv[1:4]
    env = dict(os.environ, CONVO_HOME=workdir)
    env.pop("CONVO_STORE", None)
    sid = subprocess.run([convo, "demo"], env=env, check=True, capture_output=True,
                         text=True).stdout.strip()
    port = free_port()
    attacker = http.server.HTTPServer(("127.0.0.1", port), Attacker)
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    b = Browser(chromium, workdir,
                extra_args=["--host-resolver-rules=MAP attacker.example 127.0.0.1"])
    server = None
    try:
        b.goto("http://attacker.example:%d/" % port)
        if not b.eval("window.ready === true"):
            fail("the attacker's page did not load")
        # The rebinding: the attacker's server goes, convo takes the port.
        attacker.shutdown()
        attacker.server_close()
        server = subprocess.Popen([convo, "serve", "--listen", "127.0.0.1:%d" % port, "--quiet"],
                                  env=env, stdout=subprocess.PIPE, text=True)
        base = server.stdout.readline().strip().rstrip("/")
        if not base.startswith("http://"):
            fail("convo serve printed no URL")
        before = get(base, "/api/v1/health")["cursor"], get(base, "/api/v1/sessions")
        result = b.eval("window.attack(%s)" % json.dumps(sid))
        for r in result["requests"]:
            if r["status"] != 403 or r.get("kind") != "forbidden":
                fail("the page got %s for %s %s (want convo's 403 forbidden)"
                     % (r, r["method"], r["path"]))
        if result["events"]["got"] != 0 or not result["events"]["error"]:
            fail("the page's event stream was not refused: %s" % result["events"])
        after = get(base, "/api/v1/health")["cursor"], get(base, "/api/v1/sessions")
        if after != before:
            fail("the attack wrote to the store: %s -> %s" % (before, after))
        state = get(base, "/api/v1/sessions/%s/branches/main/state" % sid)
        if any(e["key"] == "owned" for e in state["entries"]):
            fail("the attack set state")
        # The same browser reaches convo by its own name.
        b.goto(base + "/")
        if not b.eval("document.querySelectorAll('table.sessions tbody tr').length === 1"):
            fail("the browser could not open convo at %s" % base)
    finally:
        b.close()
        if server is not None:
            server.terminate()
            server.wait()
    print("rebind: ok (%d requests refused)" % len(result["requests"]))


if __name__ == "__main__":
    main()
