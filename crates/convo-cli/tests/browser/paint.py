"""Measures the first paint of convo's session page in headless Chromium.

Run by `convo-bench serve` (not a test: it prints timings):

    python paint.py CHROMIUM WORKDIR BIG_URL SMALL_URL

Loads each page five times and prints, as JSON, the median time from the
start of navigation to the first contentful paint (the Paint Timing API),
server time included: {"big": ms, "small": ms}.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from webview import Browser, fail  # noqa: E402

FIRST_PAINT = """
new Promise(done => {
  const look = () => {
    const p = performance.getEntriesByName('first-contentful-paint')[0]
      || performance.getEntriesByName('first-paint')[0];
    if (p) done(p.startTime); else setTimeout(look, 20);
  };
  look();
})
"""


def first_paint(b, url):
    times = []
    for _ in range(5):
        b.goto("about:blank")
        b.goto(url)
        if not b.eval("!!document.querySelector('#session')"):
            fail("%s is not a session page" % url)
        times.append(b.eval(FIRST_PAINT))
    times.sort()
    return times[len(times) // 2]


def main():
    chromium, workdir, big, small = sys.argv[1:5]
    os.makedirs(workdir, exist_ok=True)
    b = Browser(chromium, workdir)
    try:
        out = {"small": first_paint(b, small), "big": first_paint(b, big)}
    finally:
        b.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
