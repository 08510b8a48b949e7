"""Measures the first paint and time to interactive of convo's session page in headless Chromium.

Run by `convo-bench serve` (not a test: it prints timings):

    python paint.py CHROMIUM WORKDIR BIG_URL SMALL_URL [SELECTOR]

(and by `convo-bench webdiff`, with SELECTOR `#diff`: the element the page
must hold; `#session` by default).

Loads each page five times and prints, as JSON, the median time from the
start of navigation to the first contentful paint (the Paint Timing API),
server time included, and the median time to interactive:
{"big": ms, "small": ms, "big_tti": ms, "small_tti": ms}. It polls for the paint
entry rather than awaiting load events (a page holding its event stream
open made that wait time out).
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webview import Browser, fail  # noqa: E402

LOOK = """JSON.stringify([
  !!document.querySelector(%r),
  (performance.getEntriesByName('first-contentful-paint')[0]
   || performance.getEntriesByName('first-paint')[0] || {}).startTime ?? null,
  (performance.getEntriesByType('navigation')[0] || {}).domContentLoadedEventEnd || null])"""


def look(b, selector):
    r = b.send("Runtime.evaluate", expression=LOOK % selector, returnByValue=True)
    v = r.get("result", {}).get("value")
    return json.loads(v) if v else [False, None, None]


def first_paint(b, url, selector):
    """Median first contentful paint and time to interactive (the end of
    DOMContentLoaded: the page's deferred scripts have run, its handlers
    and event stream are set up), in ms from the start of navigation."""
    times = []
    ttis = []
    for _ in range(5):
        b.send("Page.navigate", url="about:blank")
        time.sleep(0.3)
        b.send("Page.navigate", url=url)
        deadline = time.time() + 30
        while True:
            session, paint, tti = look(b, selector)
            if session and paint is not None and tti:
                break
            if time.time() > deadline:
                fail("no paint of the session page %s within 30 s" % url)
            time.sleep(0.02)
        times.append(paint)
        ttis.append(tti)
    times.sort()
    ttis.sort()
    return times[len(times) // 2], ttis[len(ttis) // 2]


def main():
    chromium, workdir, big, small = sys.argv[1:5]
    selector = sys.argv[5] if len(sys.argv) > 5 else "#session"
    os.makedirs(workdir, exist_ok=True)
    out = {}
    # One browser per page: a page's event stream can outlive it (the
    # back/forward cache), and six of them use up Chromium's connections
    # to the host, so the next navigation would wait for one to close.
    for name, url in (("small", small), ("big", big)):
        b = Browser(chromium, workdir)
        try:
            out[name], out[name + "_tti"] = first_paint(b, url, selector)
        finally:
            b.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
