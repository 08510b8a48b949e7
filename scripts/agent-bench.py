#!/usr/bin/env python3
"""Coding agents' import figures for docs/PERFORMANCE.md (not a test).

  scripts/agent-bench.py watch CONVO [N]        latency of `import --watch`: a
      Claude Code user+assistant pair appended, until its nodes are committed
      (p50/p99 of N appends, default 40)
  scripts/agent-bench.py memory CONVO TURNS SIZE [BIG]
      peak RSS (/usr/bin/time) of `convo import` of a synthetic Claude Code
      transcript: TURNS user+assistant pairs of SIZE-byte texts, the middle
      prompt BIG bytes when given

Runs in a scratch folder under /tmp, removed at the end.
"""
import json, os, shutil, sqlite3, subprocess, sys, tempfile, time, uuid

SID = "11111111-2222-4333-8444-555555555555"


class Transcript:
    def __init__(self):
        self.parent = None

    def pair(self, i, size=0, big=0):
        u = str(uuid.UUID(int=2 * i + 1, version=4))
        a = str(uuid.UUID(int=2 * i + 2, version=4))
        q = "question %d " % i + "x" * (big or size)
        s = json.dumps({"parentUuid": self.parent, "isSidechain": False, "type": "user",
                        "message": {"role": "user", "content": q}, "uuid": u,
                        "timestamp": "2026-11-24T15:53:08.139Z", "cwd": "/tmp/p", "sessionId": SID}) + "\n"
        s += json.dumps({"parentUuid": u, "isSidechain": False, "type": "assistant",
                         "message": {"id": "msg_%d" % i, "type": "message", "role": "assistant", "model": "x",
                                     "content": [{"type": "text", "text": "answer %d " % i + "y" * size}],
                                     "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}},
                         "uuid": a, "timestamp": "2026-11-24T15:53:09.139Z", "cwd": "/tmp/p", "sessionId": SID}) + "\n"
        self.parent = a
        return s


def watch(conv, n):
    d = tempfile.mkdtemp(prefix="agent-bench-")
    try:
        env = dict(os.environ, CONVO_HOME=os.path.join(d, "home"))
        subprocess.run([conv, "init"], env=env, capture_output=True, check=True)
        proj = os.path.join(d, "projects", "-tmp-p")
        os.makedirs(proj)
        f = os.path.join(proj, SID + ".jsonl")
        t = Transcript()
        with open(f, "w") as fh:
            fh.write(t.pair(0))
        w = subprocess.Popen([conv, "import", "--watch", os.path.join(d, "projects")], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        db = os.path.join(d, "home", "convo.db")

        def count():
            try:
                c = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=5)
                r = c.execute("select count(*) from nodes").fetchone()[0]
                c.close()
                return r
            except sqlite3.Error:
                return 0

        while count() == 0:
            time.sleep(0.05)
        lat = []
        for i in range(1, n + 1):
            before = count()
            t0 = time.time()
            with open(f, "a") as fh:
                fh.write(t.pair(i))
            while count() <= before:
                time.sleep(0.01)
            lat.append(time.time() - t0)
            time.sleep(0.3 + (i % 7) * 0.1)
        w.kill()
        lat.sort()
        print("watch: n=%d p50=%.2fs p99=%.2fs max=%.2fs" % (
            n, lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))], lat[-1]))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def memory(conv, turns, size, big):
    d = tempfile.mkdtemp(prefix="agent-bench-")
    try:
        env = dict(os.environ, CONVO_HOME=os.path.join(d, "home"))
        subprocess.run([conv, "init"], env=env, capture_output=True, check=True)
        f = os.path.join(d, SID + ".jsonl")
        t = Transcript()
        with open(f, "w") as fh:
            for i in range(turns):
                fh.write(t.pair(i, size, big if (big and i == turns // 2) else 0))
        r = subprocess.run(["/usr/bin/time", "-f", "%M %e", conv, "import", f, "--format", "claude-code"],
                           env=env, capture_output=True, text=True, check=True)
        kb, secs = r.stderr.strip().splitlines()[-1].split()
        mb = os.path.getsize(f) / 1e6
        print("memory: file %.1f MB, peak RSS %.1f MB (%.1fx the file), %s s" % (
            mb, int(kb) / 1024, int(kb) / 1024 / (os.path.getsize(f) / 2**20), secs))
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "watch":
        watch(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 40)
    elif len(sys.argv) >= 5 and sys.argv[1] == "memory":
        memory(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]) if len(sys.argv) > 5 else 0)
    else:
        sys.exit(__doc__)
