"""The web view's diff and graph in headless Chromium (DevTools protocol).

Run by the Rust test `test_serve::browser_diff_and_graph` (and by hand):

    python webdiff.py CONVO_BIN CHROMIUM WORKDIR [SCREENSHOT_DIR]

It starts `convo serve`, records sessions through the API and checks, as a
person reading them would: the diff of a fork that re-recorded the same
turns shows only its fork node as changed (the rest collapsed), a changed
answer is side by side with its words marked, a long diff is paged and each
page stays small, the graph says what a promote did (both names) with a
tooltip on every timeline, a session with more timelines than the graph
draws lists the rest, and on a phone both pages stack without sideways
scrolling. Screenshots at desktop and phone sizes go to SCREENSHOT_DIR.
Exits non-zero with a message on the first thing that is wrong.
"""

import os
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webview import api, drive, fail, start_serve  # noqa: E402  (the one DevTools driver)


def turns(base, sid, branch, numbers, answer=lambda i: "Answer %d: Paris has 2 million people." % i):
    lines = []
    for i in numbers:
        lines.append({"kind": "invoke", "payload": "Question %d about Paris?" % i})
        lines.append({"kind": "complete", "payload": answer(i)})
    return api(base, "POST", "/api/v1/sessions/%s/branches/%s/nodes" % (sid, branch), lines)["nodes"]


def fork(base, sid, at, name):
    api(base, "POST", "/api/v1/sessions/%s/fork" % sid, {"from": at, "branch": name})


def main():
    convo, chromium, workdir = sys.argv[1:4]
    shots = sys.argv[4] if len(sys.argv) > 4 else workdir
    env = dict(os.environ, CONVO_HOME=workdir)
    env.pop("CONVO_STORE", None)
    demo = subprocess.run([convo, "demo"], env=env, check=True, capture_output=True,
                          text=True).stdout.strip()
    server, base = start_serve(convo, env)
    drive(chromium, workdir, server, lambda b: run(b, base, demo, shots))
    print("webdiff: ok")


def count(b, sel):
    return b.eval("document.querySelectorAll(%r).length" % sel)


def run(b, base, demo, shots):
    # A session of 30 turns; `copy` forks after turn 10 and records turns
    # 11-30 the same way; `edit` does too but answers turn 20 differently.
    sid = api(base, "POST", "/api/v1/sessions", {"agent": "bot", "title": "diffs"})["id"]
    main_nodes = turns(base, sid, "main", range(1, 31))
    at = main_nodes[19]["hash"]  # turn 10's complete
    fork(base, sid, at, "copy")
    turns(base, sid, "copy", range(11, 31))
    fork(base, sid, at, "edit")
    turns(base, sid, "edit", range(11, 31),
          lambda i: ("Answer %d: Paris has 2.1 million people." if i == 20
                     else "Answer %d: Paris has 2 million people.") % i)

    b.goto(base + "/sessions/%s/diff?a=main&b=copy" % sid)
    changed = count(b, ".pair.changed, .pair.only-a, .pair.only-b")
    if changed != 1:
        fail("the diff of a one-node fork shows %r changed nodes, not 1" % changed)
    if count(b, ".pair.only-b article.node.fork") != 1:
        fail("the one change is not copy's fork node")
    if "the timeline `copy` starts here" not in b.eval("document.querySelector('.pair.only-b').textContent"):
        fail("the fork node does not say what it means")
    same = b.eval("Array.from(document.querySelectorAll('.dturns .collapsed')).map(e => e.textContent)")
    if not any("38 unchanged nodes (turns 12–30)" in s for s in same):
        fail("turns 12-30, re-recorded the same, are not one collapsed line of 38 nodes: %r" % same)
    if count(b, ".dturns .collapsed a[href]") < 1:
        fail("the collapsed stretch links nowhere")
    b.screenshot(os.path.join(shots, "webdiff-fork.png"))

    # A changed answer: side by side, the changed words marked.
    b.goto(base + "/sessions/%s/diff?a=main&b=edit" % sid)
    if count(b, ".pair.changed") != 1:
        fail("expected one changed pair in main ↔ edit, saw %r" % count(b, ".pair.changed"))
    pair = ".pair.changed"
    if count(b, pair + " .side.a article.node.complete") != 1 or count(b, pair + " .side.b article.node.complete") != 1:
        fail("the changed answer is not side by side with the one it replaced")
    dels = b.eval("Array.from(document.querySelectorAll('.pair.changed .words del')).map(e => e.textContent)")
    inss = b.eval("Array.from(document.querySelectorAll('.pair.changed .words ins')).map(e => e.textContent)")
    if dels != ["2"] or inss != ["2.1"]:
        fail("the word diff marks %r / %r, not 2 → 2.1" % (dels, inss))
    b.eval("document.querySelector('section.dturn:nth-of-type(2) h2').scrollIntoView()")
    b.screenshot(os.path.join(shots, "webdiff-desktop.png"))

    # A long diff is paged: 300 turns against a fork after turn 1 that
    # holds nothing but its fork node.
    long_sid = api(base, "POST", "/api/v1/sessions", {"agent": "bot", "title": "long"})["id"]
    first = []
    for k in range(3):
        first += turns(base, long_sid, "main", range(1 + 100 * k, 101 + 100 * k))
    fork(base, long_sid, first[1]["hash"], "early")
    url = base + "/sessions/%s/diff?a=main&b=early" % long_sid
    size = len(urllib.request.urlopen(url).read())
    b.goto(url)
    pages = b.eval("Number(document.getElementById('diff').dataset.pages)")
    if pages < 3:
        fail("a 598-node diff has %r pages" % pages)
    articles = count(b, "article.node")
    if articles > 210:
        fail("page 1 of the long diff renders %r nodes" % articles)
    if size > 1_000_000:
        fail("page 1 of the long diff is %d bytes" % size)
    b.eval("document.querySelector('nav.pager a[rel=next]').click()")
    b.wait_for("location.search.includes('page=2')", "page 2")
    b.wait_for("document.readyState === 'complete' && document.getElementById('diff') !== null", "page 2 to load")
    if b.eval("document.getElementById('diff').dataset.page") != "2" or count(b, ".pair.only-a") < 1:
        fail("page 2 of the long diff shows nothing")
    print("webdiff: long diff page 1: %d bytes, %d pages" % (size, pages))

    # The graph of the demo session: a promote says what it did, both
    # names kept; every timeline has a tooltip and is a link.
    b.goto(base + "/sessions/" + demo)
    cap = b.eval("document.querySelector('figure.graph figcaption').textContent")
    if "became main" not in cap or "sealed as" not in cap or "broken-" not in cap:
        fail("the caption does not say what the promote did: %r" % cap)
    if "(○" not in cap:
        fail("the caption does not describe the fork point as drawn: %r" % cap)
    lanes = count(b, "figure.graph line.lane")
    titles = count(b, "figure.graph a.lanelink > title")
    if titles != lanes or lanes < 2:
        fail("%r lanes but %r tooltips" % (lanes, titles))
    tips = b.eval("Array.from(document.querySelectorAll('figure.graph a.lanelink > title')).map(t => t.textContent)")
    if not any("head at turn" in t and "created" in t for t in tips):
        fail("the tooltips lack head turn / created: %r" % tips)
    if not any("sealed" in t for t in tips):
        fail("no tooltip says sealed: %r" % tips)
    labels = b.eval("Array.from(document.querySelectorAll('figure.graph text.label')).map(t => t.textContent)")
    if not any(l.startswith("main") and "was " in l for l in labels):
        fail("main's label does not keep the promoted branch's old name: %r" % labels)
    if count(b, "figure.graph .lanehit") != lanes:
        fail("the lanes are not clickable as a whole")
    # The star is not under the head dot.
    star = b.eval("(() => { const s = document.querySelector('figure.graph text.promote'); const r = s.getBoundingClientRect();"
                  " return Array.from(document.querySelectorAll('figure.graph circle.head')).every(c => { const q = c.getBoundingClientRect();"
                  " return r.bottom <= q.top || r.top >= q.bottom || r.right <= q.left || r.left >= q.right; }); })()")
    if not star:
        fail("the promote star sits under a head dot")
    if count(b, "figure.graph text.tick") < 2:
        fail("the graph has no turn axis")
    b.screenshot(os.path.join(shots, "webdiff-graph.png"))

    # More timelines than the graph draws: the rest are counted and listed.
    many = api(base, "POST", "/api/v1/sessions", {"agent": "bot", "title": "many"})["id"]
    nodes = turns(base, many, "main", range(1, 4))
    for k in range(30):
        fork(base, many, nodes[k % 6]["hash"], "f%02d" % k)
    b.goto(base + "/sessions/" + many)
    drawn = count(b, "figure.graph line.lane")
    listed = count(b, "figure.graph details.more-lanes li a")
    if drawn + listed != 31 or listed == 0:
        fail("31 timelines: %r drawn, %r listed" % (drawn, listed))
    summary = b.eval("document.querySelector('figure.graph details.more-lanes summary').textContent")
    if str(listed) not in summary:
        fail("the summary does not count the timelines not drawn: %r" % summary)
    # The current timeline is drawn even when it is past the limit.
    b.goto(base + "/sessions/%s?branch=f29" % many)
    if not b.eval("Array.from(document.querySelectorAll('figure.graph text.label.current')).some(t => t.textContent.startsWith('f29'))"):
        fail("the current timeline is not drawn")

    # A phone: the diff stacks, each side labelled; the graph's text stays legible.
    b.send("Emulation.setDeviceMetricsOverride", width=390, height=844, deviceScaleFactor=1, mobile=True)
    b.goto(base + "/sessions/%s/diff?a=main&b=edit" % sid)
    width = b.eval("document.documentElement.scrollWidth")
    if width > 400:
        fail("the diff page scrolls sideways on a phone (%s px)" % width)
    cols = b.eval("getComputedStyle(document.querySelector('.pair.changed')).gridTemplateColumns.split(' ').length")
    if cols != 1:
        fail("the diff's sides do not stack on a phone (%r columns)" % cols)
    label = b.eval("getComputedStyle(document.querySelector('.pair.changed .side.a'), '::before').content")
    if "A" not in (label or ""):
        fail("the stacked sides are not labelled: %r" % label)
    b.screenshot(os.path.join(shots, "webdiff-phone.png"))
    b.goto(base + "/sessions/" + demo)
    small = b.eval("Math.min(...Array.from(document.querySelectorAll('figure.graph text')).map(t => t.getBoundingClientRect().height))")
    if small < 11:
        fail("graph text is %.1f px tall on a phone" % small)
    clipped = b.eval("(() => { const f = document.querySelector('figure.graph svg').getBoundingClientRect();"
                     " return Array.from(document.querySelectorAll('figure.graph text')).filter(t => {"
                     " const r = t.getBoundingClientRect(); return r.left < f.left - 1 || r.right > f.right + 1; }).length; })()")
    if clipped:
        fail("%d graph texts are cut at the edge on a phone" % clipped)
    if b.eval("document.documentElement.scrollWidth") > 400:
        fail("the session page scrolls sideways on a phone")
    b.screenshot(os.path.join(shots, "webdiff-graph-phone.png"))


if __name__ == "__main__":
    main()
