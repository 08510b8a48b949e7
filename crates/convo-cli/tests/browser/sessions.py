"""The session list at 2,000 sessions in headless Chromium (DevTools protocol).

Run by the Rust test `test_serve::browser_session_list_sorts_and_pages` (and by hand):

    python sessions.py CONVO_BIN CHROMIUM WORKDIR [SCREENSHOT_DIR]

It records 2,000 sessions through the API (a few with calls, one with a
very long title, one with a hostile title) and checks, as a person would:
page numbers up to the last page, the last page one click away; sorting by
tokens, cost, title and created, each heading sorting the other way when
clicked again; a long title wrapping in its column while the id and date
keep theirs; no injected script running. Exits non-zero with a message on
the first thing that is wrong.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webview import api, drive, fail, start_serve  # noqa: E402  (the one DevTools driver)

N = 2000
LONG = "A very long title " * 20
XSS = "<img src=x onerror=\"window.__x=1\"><script>window.__x=2</script>"


def main():
    convo, chromium, workdir = sys.argv[1:4]
    shots = sys.argv[4] if len(sys.argv) > 4 else workdir
    env = dict(os.environ, CONVO_HOME=workdir)
    env.pop("CONVO_STORE", None)
    server, base = start_serve(convo, env)
    drive(chromium, workdir, server, lambda b: run(b, base, shots))
    print("sessions: ok")


def call(tokens):
    resp = {"id": "c", "object": "chat.completion", "model": "gpt-4o", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": tokens, "completion_tokens": 1}}
    return [{"kind": "invoke", "payload": "go"},
            {"kind": "request", "payload": json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "go"}]})},
            {"kind": "response", "payload": json.dumps(resp), "sequence": 1,
             "diagnostics": {"status": 200, "model": "gpt-4o", "usage": {"prompt_tokens": tokens, "completion_tokens": 1}}},
            {"kind": "complete", "payload": "ok"}]


def rows(b):
    b.wait_for("document.readyState === 'complete' && document.querySelectorAll('table.sessions tbody tr').length > 0",
               "the list")
    return b.eval("Array.from(document.querySelectorAll('table.sessions tbody tr')).map(r => r.querySelector('td.title').textContent)")


def click_heading(b, label):
    b.eval("Array.from(document.querySelectorAll('table.sessions th a.sort')).find(a => a.textContent === %r).click()" % label)
    b.wait_for("document.readyState === 'complete' && location.search.includes('sort=')", "the list sorted by " + label)


def run(b, base, shots):
    t0 = time.time()
    for i in range(N):
        title = "session %04d" % i
        if i == 7:
            title = LONG
        if i == 8:
            title = XSS
        sid = api(base, "POST", "/api/v1/sessions", {"agent": "bot", "title": title})["id"]
        if i % 100 == 0:
            api(base, "POST", "/api/v1/sessions/%s/branches/main/nodes" % sid, call(1000 + i))
    print("sessions: recorded %d sessions in %.1f s" % (N, time.time() - t0))

    b.goto(base + "/")
    if len(rows(b)) != 50:
        fail("the first page does not list 50 sessions")
    if b.eval("typeof window.__x") != "undefined":
        fail("a hostile title ran a script")
    pages = b.eval("Array.from(document.querySelectorAll('nav.pager .page')).map(p => p.textContent)")
    if "40" not in pages or "1" not in pages:
        fail("page numbers do not reach the last page: %r" % pages)
    b.eval("Array.from(document.querySelectorAll('nav.pager a.page')).find(a => a.textContent === '40').click()")
    b.wait_for("location.search.includes('offset=1950')", "the last page")
    last = rows(b)
    if len(last) != 50 or last[-1] != "session 0000":
        fail("the last page does not end with the first session: %r" % last[-3:])
    if b.eval("document.querySelector('nav.pager strong.page').textContent") != "40":
        fail("the last page is not marked as the current one")

    # Tokens: most first, then least first.
    b.goto(base + "/")
    started = time.time()
    click_heading(b, "Tokens in / out")
    print("sessions: sorted %d sessions by tokens in %.0f ms (page load, cold figures)" % (N, (time.time() - started) * 1000))
    top = rows(b)
    if top[0] != "session 1900" or top[1] != "session 1800":
        fail("sorting by tokens does not put the most first: %r" % top[:3])
    if b.eval("document.querySelector('th.c-tokens').getAttribute('aria-sort')") != "descending":
        fail("the tokens heading does not say it sorts")
    click_heading(b, "Tokens in / out")
    b.wait_for("location.search.includes('dir=asc')", "the other way")
    if rows(b)[0] == "session 1900":
        fail("clicking again does not sort the other way")
    # The pages keep the order.
    b.eval("document.querySelector('nav.pager a.next').click()")
    b.wait_for("location.search.includes('offset=50')", "the next page")
    if "sort=tokens" not in b.eval("location.search"):
        fail("the next page lost the order")

    # Title, A to Z: the long title before "session …", the hostile one first.
    b.goto(base + "/?sort=title")
    names = rows(b)
    if names[0] != XSS or names[1].strip() != LONG.strip():
        fail("sorting by title is not A to Z: %r" % [n[:20] for n in names[:3]])
    # The long title wraps in its column; the id and the date keep theirs.
    widths = b.eval("""JSON.stringify((() => { const r = Array.from(document.querySelectorAll('table.sessions tbody tr'))[1];
        return [r.querySelector('td.mono').getBoundingClientRect().width, r.querySelector('td.date').scrollWidth - r.querySelector('td.date').clientWidth,
                r.getBoundingClientRect().height]; })())""")
    idw, overflow, height = json.loads(widths)
    if idw < 80 or overflow > 1 or height > 90:
        fail("a long title crushes the other columns: id %s px, date overflows by %s px, row %s px high" % (idw, overflow, height))
    b.screenshot(os.path.join(shots, "sessions-sorted.png"))

    # Created, oldest first.
    b.goto(base + "/?sort=created&dir=asc")
    if rows(b)[0] != "session 0000":
        fail("oldest first does not start with the first session")
    if b.eval("typeof window.__x") != "undefined":
        fail("a hostile title ran a script")


if __name__ == "__main__":
    main()
