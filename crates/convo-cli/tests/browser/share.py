"""`convo share` files checked in headless Chromium (DevTools protocol).

Run by the Rust test `test_serve::browser_share` (and by hand):

    python share.py CONVO_BIN CHROMIUM WORKDIR [SCREENSHOT_DIR]

It records a session holding hostile text (script tags, event handlers,
CR LF line ends, a credential) through the API, writes it with `convo
share`, and as a colleague receiving the file would: opens it from
file:// and sees it verified; opens copies with one byte changed (in a
node's encoding, in a payload) and sees each refused, naming the node;
checks that metadata only carries no message text and still verifies,
that --redact-secrets leaves the credential out, that no injected script
ran, that the web view's "Share" link serves the same file, and how long a
1,000-call session takes to verify (printed, not asserted). Exits non-zero
with a message on the first thing that is wrong.
"""

import json
import os
import re
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webview import api, drive, fail, start_serve  # noqa: E402  (the one DevTools driver)

XSS = "<script>window.__x=1</script><img src=x onerror=\"window.__x=2\">"
KEY = "sk-ant-api03-" + "Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6kM9nP2rS5uV8xA1cD4fG7iL0oR3tU6wX9zB2dE5gH8jK1mN4pQ-" + "AbCdEfAA"


def share(convo, env, workdir, name, *args):
    path = os.path.join(workdir, name)
    out = subprocess.run([convo, "share", *args, "-o", path], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        fail("convo share %s: %s" % (" ".join(args), out.stderr))
    return path, out.stderr


def verdict(b, path):
    b.goto("file://" + path)
    b.wait_for("!!document.body && document.body.hasAttribute('data-verified')", "the share page's verdict of " + path, timeout=60)
    return b.eval("document.body.getAttribute('data-verified')")


def data_block(html):
    m = re.search(r'<pre id="convo-data" hidden>(.*?)</pre>', html, re.S)
    if not m:
        fail("no data block in the share file")
    return m


def unescape(s):
    return s.replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def one_byte_changed(path, out, pick):
    """A copy of the file with one byte of the data changed: `pick(data)`
    gives (string to find, the node hash that must be named)."""
    html = open(path, encoding="utf-8").read()
    m = data_block(html)
    data = json.loads(unescape(m.group(1)))
    target, named = pick(data)
    at = html.index(target, m.start(1)) + len(target) // 2
    c = html[at]
    swapped = "B" if c != "B" else "C"
    bad = html[:at] + swapped + html[at + 1:]
    if len(bad.encode()) != len(html.encode()):
        fail("the edit changed more than one byte")
    open(out, "w", encoding="utf-8").write(bad)
    return named


def record(base):
    sid = api(base, "POST", "/api/v1/sessions", {"agent": "<b>bot</b>" + XSS, "title": "share " + XSS})["id"]
    req = {"model": "gpt-4o", "messages": [
        {"role": "system", "content": "Be brief. " + XSS},
        {"role": "user", "content": "What is in Paris?\r\nKey: " + KEY}]}
    resp = {"id": "c1", "object": "chat.completion", "model": "gpt-4o", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "The Louvre. " + XSS}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3}}
    api(base, "POST", "/api/v1/sessions/%s/branches/main/nodes" % sid, [
        {"kind": "invoke", "payload": "Tell me about Paris\r\nplease " + XSS},
        {"kind": "request", "payload": json.dumps(req), "diagnostics": {"model": "gpt-4o"}},
        {"kind": "response", "payload": json.dumps(resp), "sequence": 1,
         "diagnostics": {"status": 200, "latency_ms": 420}},
        {"kind": "complete", "payload": "The Louvre " + XSS},
        {"kind": "invoke", "payload": "And Lyon?"},
        {"kind": "complete", "payload": "Food."},
    ])
    nodes = api(base, "GET", "/api/v1/sessions/%s/branches/main/timeline" % sid)["nodes"]
    api(base, "POST", "/api/v1/sessions/%s/fork" % sid, {"from": nodes[3]["hash"], "branch": "alt"})
    api(base, "POST", "/api/v1/sessions/%s/branches/alt/nodes" % sid, [
        {"kind": "invoke", "payload": "And Nice?"}, {"kind": "complete", "payload": "Sea."}])
    return sid


def many_calls(base, n):
    sid = api(base, "POST", "/api/v1/sessions", {"agent": "bot", "title": "a thousand calls"})["id"]
    lines = [{"kind": "invoke", "payload": "Plan the trip"}]
    history = []
    for i in range(1, n + 1):
        history = (history + [{"role": "user", "content": "Step %d: what next? %s" % (i, "x" * 200)}])[-6:]
        req = {"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "You plan trips. " * 20}] + history}
        resp = {"id": "c%d" % i, "object": "chat.completion", "model": "gpt-4o-mini", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Step %d: go on. %s" % (i, "y" * 150)},
             "finish_reason": "stop"}], "usage": {"prompt_tokens": 300 + i, "completion_tokens": 40}}
        lines.append({"kind": "request", "payload": json.dumps(req), "diagnostics": {"model": "gpt-4o-mini"}})
        lines.append({"kind": "response", "payload": json.dumps(resp), "sequence": i,
                      "diagnostics": {"status": 200, "latency_ms": 100 + i % 50}})
    lines.append({"kind": "complete", "payload": "Done."})
    api(base, "POST", "/api/v1/sessions/%s/branches/main/nodes" % sid, lines)
    return sid


def main():
    convo, chromium, workdir = sys.argv[1:4]
    shots = sys.argv[4] if len(sys.argv) > 4 else workdir
    env = dict(os.environ, CONVO_HOME=workdir)
    env.pop("CONVO_STORE", None)
    server, base = start_serve(convo, env)
    drive(chromium, workdir, server, lambda b: run(b, convo, env, workdir, base, shots))
    print("share: ok")


def no_script_ran(b, where):
    if b.eval("typeof window.__x") != "undefined":
        fail("an injected script ran on " + where)


def run(b, convo, env, workdir, base, shots):
    sid = record(base)

    # With content, from file://: verified, drawn from what was verified.
    full, _ = share(convo, env, workdir, "full.html", sid, "--content", "--all-branches")
    html = open(full, encoding="utf-8").read()
    if re.search(r"https?://", html):
        fail("the share file names an external URL: %s" % re.search(r".{30}https?://.{30}", html).group(0))
    if verdict(b, full) != "true":
        fail("the share file does not verify: " + b.eval("document.getElementById('problems').textContent"))
    no_script_ran(b, "the share page")
    if b.eval("document.querySelectorAll('article.node').length") != 6:
        fail("main's 6 nodes are not drawn")
    shown = b.eval("document.getElementById('turns').textContent")
    if "<script>window.__x=1</script>" not in shown or "The Louvre." not in shown:
        fail("the hostile text is not shown as text: %r" % shown[:400])
    if "What is in Paris?" not in b.eval("(document.querySelector('article.node.request .convo') || {}).textContent || ''"):
        fail("the request is not drawn as a conversation")
    if "✓ Verified" not in b.eval("document.getElementById('badge').textContent"):
        fail("no verified badge")
    b.screenshot(os.path.join(shots, "share-verified.png"))

    # The other timeline is one click away.
    b.eval("[...document.querySelectorAll('#timelines button')].find(x => x.textContent.includes('alt')).click()")
    b.wait_for("document.getElementById('turns').textContent.includes('And Nice?')", "the alt timeline")

    # One byte changed in a node's encoding: refused, naming that node.
    bad = os.path.join(workdir, "bad-node.html")
    named = one_byte_changed(full, bad, lambda d: (d["nodes"][2][1], d["nodes"][2][0]))
    if verdict(b, bad) != "false":
        fail("a changed node encoding still verifies")
    problems = b.eval("document.getElementById('problems').textContent")
    if named not in problems:
        fail("the refusal does not name node %s: %r" % (named, problems))
    if "✗ Not verified" not in b.eval("document.getElementById('badge').textContent"):
        fail("no refusal badge")
    b.screenshot(os.path.join(shots, "share-refused.png"))

    # One byte changed in a payload: refused, naming a node that carries it.
    bad = os.path.join(workdir, "bad-payload.html")

    def payload_pick(d):
        for h, _, p in d["nodes"]:
            if isinstance(p, int):
                return d["payloads"][p], h
        fail("no payload in the file")

    named = one_byte_changed(full, bad, payload_pick)
    if verdict(b, bad) != "false":
        fail("a changed payload still verifies")
    if named not in b.eval("document.getElementById('problems').textContent"):
        fail("the refusal does not name node %s" % named)

    # One byte changed in a claimed hash: refused, naming it.
    bad = os.path.join(workdir, "bad-hash.html")
    named = one_byte_changed(full, bad, lambda d: (d["nodes"][1][0], d["nodes"][1][0]))
    if verdict(b, bad) != "false":
        fail("a changed hash still verifies")

    # Metadata only (the default): no message text, still verifies.
    meta, said = share(convo, env, workdir, "meta.html", sid, "--all-branches")
    if "metadata only" not in said:
        fail("convo share does not say it wrote metadata only: %r" % said)
    text = open(meta, encoding="utf-8").read()
    data = json.loads(unescape(data_block(text).group(1)))
    if data["payloads"] or data["content"]:
        fail("metadata only carries payloads")
    if verdict(b, meta) != "true":
        fail("the metadata-only file does not verify: " + b.eval("document.getElementById('problems').textContent"))
    if "not in this file" not in b.eval("document.getElementById('turns').textContent"):
        fail("metadata only does not say the payloads are left out")

    # --redact-secrets: the credential is not in the file.
    red, _ = share(convo, env, workdir, "redacted.html", sid, "--content", "--redact-secrets")
    raw = open(red, encoding="utf-8").read()
    data = json.loads(unescape(data_block(raw).group(1)))
    import base64
    carried = "".join(base64.b64decode(p).decode("utf-8", "replace") for p in data["payloads"])
    if KEY in raw or KEY in carried:
        fail("--redact-secrets left the credential in the file")
    if verdict(b, red) != "true":
        fail("the redacted file does not verify")
    if "Credentials replaced" not in b.eval("document.getElementById('turns').textContent"):
        fail("the redacted payload is not marked")

    # The web view's Share link serves the same file.
    main_only, _ = share(convo, env, workdir, "main.html", sid, "--content")
    html = open(main_only, encoding="utf-8").read()
    b.goto(base + "/sessions/" + sid)
    href = b.eval("document.getElementById('share-content').getAttribute('href')")
    served = urllib.request.urlopen(base + href).read().decode("utf-8")
    if served != html:
        fail("the web view's Share serves another file than convo share --content")
    b.eval("document.getElementById('share-content').click()")
    b.wait_for("!!document.body && document.body.getAttribute('data-verified') === 'true'", "the served share page to verify")
    no_script_ran(b, "the served share page")

    # 1,000 calls: size against the session's distinct bytes, time to verify.
    big = many_calls(base, 1000)
    path, said = share(convo, env, workdir, "big.html", big, "--content")
    if verdict(b, path) != "true":
        fail("the 1,000-call share does not verify")
    ms = b.eval("document.body.getAttribute('data-verify-ms')")
    print("share: 1,000 calls: %s; verified in %s ms in Chromium" % (said.strip(), ms))


if __name__ == "__main__":
    main()
