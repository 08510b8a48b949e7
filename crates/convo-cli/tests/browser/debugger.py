"""The web view's debugger pages in headless Chromium (DevTools protocol).

Run by the Rust tests of `test_debugger` (and by hand):

    python debugger.py CONVO_BIN CHROMIUM HOME SHOTS SPEC_JSON

It starts `convo serve` on HOME (whose store and test runs the Rust test
prepared) and opens each page of SPEC_JSON, a list of
`{"path", "expect": [[selector, count], ...], "text": [[selector, text], ...],
"shot"}`: every selector must match at least `count` elements, every text
must appear in the first element a selector matches, no dialog may open and
no payload may run (`window.__pwned` stays unset), and the page must not
scroll sideways at a phone's width. A screenshot of each page goes to SHOTS.
Exits non-zero with a message on the first thing that is wrong.
"""

import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webview import Browser, drive, fail, start_serve  # the one DevTools driver


def check(b: Browser, base: str, page: dict[str, Any], shots: str) -> None:
    url = base + page["path"]
    b.goto(url)
    for selector, count in page.get("expect", []):
        n = b.eval(f"document.querySelectorAll({json.dumps(selector)}).length")
        if n < count:
            fail(f"{page['path']}: {selector!r} matches {n!r} elements, not at least {count!r}")
    for selector, text in page.get("text", []):
        got = b.eval(
            f"(document.querySelector({json.dumps(selector)}) || {{textContent: ''}}).textContent"
        )
        if text not in got:
            fail(f"{page['path']}: {selector!r} does not say {text!r}: {got[:500]!r}")
    b.pump(0.3)
    if any(e["method"] == "Page.javascriptDialogOpening" for e in b.events):
        fail("a payload opened a dialog on " + page["path"])
    if b.eval("window.__pwned !== undefined"):
        fail("a payload ran on " + page["path"])
    if page.get("shot"):
        b.screenshot(os.path.join(shots, page["shot"]))
    # A phone: the page stacks, nothing scrolls sideways.
    b.send(
        "Emulation.setDeviceMetricsOverride",
        width=390,
        height=844,
        deviceScaleFactor=1,
        mobile=True,
    )
    b.goto(url)
    wide = b.eval("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    b.send("Emulation.clearDeviceMetricsOverride")
    if wide > 2:
        fail(f"{page['path']} scrolls sideways by {wide}px on a phone")


def main() -> None:
    convo, chromium, home, shots, spec = sys.argv[1:6]
    pages = json.loads(spec)
    env = dict(os.environ, CONVO_HOME=home)
    env.pop("CONVO_STORE", None)
    os.makedirs(shots, exist_ok=True)
    server, base = start_serve(convo, env)
    work = os.path.join(home, "browser")
    os.makedirs(work, exist_ok=True)

    def run(b: Browser) -> None:
        for page in pages:
            check(b, base, page, shots)

    drive(chromium, work, server, run)
    print("debugger: ok")


if __name__ == "__main__":
    main()
