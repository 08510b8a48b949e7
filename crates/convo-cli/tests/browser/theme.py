"""The web view's comfort in headless Chromium (DevTools protocol).

Run by the Rust test `test_serve::browser_theme_skip_link_and_help` (and by hand):

    python theme.py CONVO_BIN CHROMIUM WORKDIR [SCREENSHOT_DIR]

It checks, as a person would: the page follows the system's dark or light
preference; the toggle switches the theme and the choice survives a reload
(localStorage), the share page included; the first Tab stop is the skip
link, which moves focus to the content; `?` opens the help panel in the
page (no alert()), Escape closes it; the browser gets pages gzipped.
Exits non-zero with a message on the first thing that is wrong.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webview import drive, fail, start_serve  # noqa: E402  (the one DevTools driver)

BG = "getComputedStyle(document.body).backgroundColor"


def scheme(b, value):
    b.send("Emulation.setEmulatedMedia", features=[{"name": "prefers-color-scheme", "value": value}])


def key(b, k, code=None, vk=0):
    for t in ("keyDown", "keyUp"):
        b.send("Input.dispatchKeyEvent", type=t, key=k, code=code or k, text=k if len(k) == 1 and t == "keyDown" else "",
               windowsVirtualKeyCode=vk)


def main():
    convo, chromium, workdir = sys.argv[1:4]
    shots = sys.argv[4] if len(sys.argv) > 4 else workdir
    env = dict(os.environ, CONVO_HOME=workdir)
    env.pop("CONVO_STORE", None)
    sid = subprocess.run([convo, "demo"], env=env, check=True, capture_output=True, text=True).stdout.strip()
    server, base = start_serve(convo, env)
    drive(chromium, workdir, server, lambda b: run(b, base, sid, shots))
    print("theme: ok")


def run(b, base, sid, shots):
    url = base + "/sessions/" + sid
    scheme(b, "light")
    b.goto(url)
    light = b.eval(BG)
    scheme(b, "dark")
    b.wait_for("%s !== %r" % (BG, light), "the dark theme from prefers-color-scheme")
    dark = b.eval(BG)
    if dark != "rgb(16, 20, 28)":
        fail("the dark background is %s" % dark)
    b.screenshot(os.path.join(shots, "theme-dark.png"))

    # The toggle picks light against the system's dark, kept over a reload.
    b.eval("document.getElementById('theme').click()")
    if b.eval(BG) != light:
        fail("the toggle did not switch to light")
    b.goto(url)
    if b.eval(BG) != light:
        fail("the chosen theme did not survive a reload")
    b.eval("document.getElementById('theme').click()")
    if b.eval(BG) != dark:
        fail("the toggle did not switch back to dark")

    # The first Tab stop is the skip link; following it focuses the content.
    b.goto(url)
    b.eval("document.activeElement && document.activeElement.blur()")
    key(b, "Tab", "Tab", 9)
    if b.eval("document.activeElement.className") != "skip":
        fail("the first tab stop is %r, not the skip link" % b.eval("document.activeElement.outerHTML.slice(0, 80)"))
    if b.eval("document.activeElement.getBoundingClientRect().top < 0"):
        fail("the focused skip link is not visible")
    key(b, "Enter", "Enter", 13)
    b.wait_for("document.activeElement.id === 'main'", "focus on the content after the skip link")

    # `?` opens the help panel in the page; Escape closes it; no dialog box.
    b.events = []
    key(b, "?", "Slash", 191)
    b.wait_for("document.getElementById('help').open", "the help panel")
    if "j / k" not in b.eval("document.getElementById('help').textContent").replace("\n", " ") and \
            "next / previous message" not in b.eval("document.getElementById('help').textContent"):
        fail("the help panel does not list the keys")
    b.screenshot(os.path.join(shots, "theme-help.png"))
    key(b, "Escape", "Escape", 27)
    b.wait_for("!document.getElementById('help').open", "Escape to close the help panel")
    if any(e["method"] == "Page.javascriptDialogOpening" for e in b.events):
        fail("help opened a JavaScript dialog")

    # Pages reach the browser gzipped.
    enc = b.eval("""fetch(location.href).then(r => r.headers.get('content-encoding') + ' ' + r.headers.get('etag'))""")
    if not enc.startswith("gzip "):
        fail("the page was not gzipped: %r" % enc)

    # The share page follows the same choice.
    b.goto(base + "/sessions/" + sid + "/share")
    b.wait_for("!!document.body && document.body.getAttribute('data-verified') === 'true'", "the share page to verify")
    if b.eval(BG) != dark:
        fail("the share page does not follow the dark theme")


if __name__ == "__main__":
    main()
