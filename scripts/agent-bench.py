#!/usr/bin/env python3
"""Coding agents' import figures for docs/PERFORMANCE.md (not a test).

  scripts/agent-bench.py watch CONVO [N]        latency of `import --watch`: a
      Claude Code user+assistant pair appended, until its nodes are committed
      (p50/p99 of N appends, default 40)
  scripts/agent-bench.py memory CONVO TURNS SIZE [BIG] [claude-code|codex|gemini-cli|gemini-legacy|opencode]
      peak RSS (/usr/bin/time) of `convo import` of a synthetic Claude Code
      transcript (or Codex rollout, Gemini CLI .jsonl chat, Gemini CLI
      legacy .json document, opencode.db): TURNS user+assistant pairs of SIZE-byte
      texts, the middle prompt BIG bytes when given (0: none); also the
      baseline (the import of a one-turn file) and the peak above it
      against the largest record and the file (CONVO_BENCH_REDACT=1: with
      --redact-secrets)
  scripts/agent-bench.py regrow CONVO TURNS SIZE [claude-code|codex]
      peak RSS and RssAnon of re-importing a grown transcript (what every
      `--watch` tick does): TURNS user+assistant pairs of SIZE-byte texts
      imported, one pair appended, the file imported again

Runs in a scratch folder under /tmp, removed at the end.
"""
import json, os, shutil, sqlite3, subprocess, sys, tempfile, time, uuid

SID = "11111111-2222-4333-8444-555555555555"


class Transcript:
    def __init__(self):
        self.parent = None

    def head(self):
        return ""

    def tail(self):
        return ""

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


class Rollout(Transcript):
    """A Codex rollout: session_meta, then user and assistant messages."""

    def __init__(self):
        self.first = True

    def pair(self, i, size=0, big=0):
        s = ""
        if self.first:
            s += json.dumps({"timestamp": "2026-11-24T15:53:08.139Z", "type": "session_meta",
                             "payload": {"id": SID, "cwd": "/tmp/p", "cli_version": "0.169.0"}}) + "\n"
            self.first = False
        q = "question %d " % i + "x" * (big or size)
        s += json.dumps({"timestamp": "2026-11-24T15:53:08.139Z", "type": "response_item",
                         "payload": {"type": "message", "role": "user",
                                     "content": [{"type": "input_text", "text": q}]}}) + "\n"
        s += json.dumps({"timestamp": "2026-11-24T15:53:09.139Z", "type": "response_item",
                         "payload": {"type": "message", "role": "assistant",
                                     "content": [{"type": "output_text", "text": "answer %d " % i + "y" * size}]}}) + "\n"
        return s


class GeminiChat:
    """A Gemini CLI chat (.jsonl): the session line, then user and gemini messages."""

    def __init__(self):
        self.first = True

    def head(self):
        return ""

    def tail(self):
        return ""

    def message(self, m):
        return json.dumps(m) + "\n"

    def pair(self, i, size=0, big=0):
        s = ""
        if self.first:
            s += json.dumps({"sessionId": SID, "projectHash": "9c1a7f0e", "startTime": "2026-11-24T15:53:08.139Z",
                             "lastUpdated": "2026-11-24T15:53:08.139Z", "kind": "main"}) + "\n"
            self.first = False
        q = "question %d " % i + "x" * (big or size)
        s += self.message({"id": "u%d" % i, "timestamp": "2026-11-24T15:53:08.139Z", "type": "user",
                           "content": [{"text": q}]})
        s += self.message({"id": "g%d" % i, "timestamp": "2026-11-24T15:53:09.139Z", "type": "gemini",
                           "content": "answer %d " % i + "y" * size, "model": "gemini-2.5-pro",
                           "tokens": {"input": 1, "output": 1, "cached": 0, "total": 2}})
        return s


class GeminiLegacy(GeminiChat):
    """An older Gemini CLI chat (.json): one pretty-printed ConversationRecord."""

    def head(self):
        self.first = False
        return ('{\n  "sessionId": "%s",\n  "projectHash": "9c1a7f0e",\n  "startTime": "2026-11-24T15:53:08.139Z",\n'
                '  "lastUpdated": "2026-11-24T15:53:08.139Z",\n  "messages": [' % SID)

    def message(self, m):
        s = ("\n" if self.first_message else ",\n") + "\n".join(
            "    " + l for l in json.dumps(m, indent=2).splitlines())
        self.first_message = False
        return s

    def tail(self):
        return "\n  ]\n}"

    def __init__(self):
        super().__init__()
        self.first_message = True


OPENCODE_SCHEMA = """
CREATE TABLE project (id text PRIMARY KEY, worktree text NOT NULL, vcs text, name text, icon_url text,
  icon_url_override text, icon_color text, time_created integer NOT NULL, time_updated integer NOT NULL,
  time_initialized integer, sandboxes text NOT NULL, commands text);
CREATE TABLE session (id text PRIMARY KEY, project_id text NOT NULL, parent_id text, slug text NOT NULL,
  directory text NOT NULL, title text NOT NULL, version text NOT NULL, share_url text, summary_additions integer,
  summary_deletions integer, summary_files integer, summary_diffs text, revert text, permission text,
  time_created integer NOT NULL, time_updated integer NOT NULL, time_compacting integer, time_archived integer);
CREATE TABLE message (id text PRIMARY KEY, session_id text NOT NULL, time_created integer NOT NULL,
  time_updated integer NOT NULL, data text NOT NULL);
CREATE TABLE part (id text PRIMARY KEY, message_id text NOT NULL, session_id text NOT NULL,
  time_created integer NOT NULL, time_updated integer NOT NULL, data text NOT NULL);
"""


def opencode_db(path, turns, size, big):
    """An opencode.db (the tables of opencode 1.18.34): one session, TURNS user+assistant
    messages with a text part each; returns the largest row's size."""
    db = sqlite3.connect(path)
    db.executescript(OPENCODE_SCHEMA)
    t0 = 1795554332125
    db.execute("INSERT INTO project VALUES('global','/',NULL,NULL,NULL,NULL,NULL,?,?,NULL,'[]',NULL)", (t0, t0))
    db.execute("INSERT INTO session (id, project_id, slug, directory, title, version, time_created, time_updated)"
               " VALUES('ses_bench','global','bench','/tmp/p','bench','1.18.34',?,?)", (t0, t0))
    largest = 0
    for i in range(turns):
        t = t0 + 10 * i
        q = "question %d " % i + "x" * (big if (big and i == turns // 2) else size)
        u, a = "msg_%08du" % i, "msg_%08dv" % i
        rows = [
            ("message", (u, "ses_bench", t, t, json.dumps({"role": "user", "time": {"created": t}, "agent": "build"}))),
            ("part", ("prt_%08du" % i, u, "ses_bench", t, t, json.dumps({"type": "text", "text": q}))),
            ("message", (a, "ses_bench", t + 1, t + 2, json.dumps(
                {"parentID": u, "role": "assistant", "modelID": "m", "providerID": "p",
                 "time": {"created": t + 1, "completed": t + 2}, "finish": "stop"}))),
            ("part", ("prt_%08dv" % i, a, "ses_bench", t + 1, t + 2,
                      json.dumps({"type": "text", "text": "answer %d " % i + "y" * size}))),
        ]
        for table, r in rows:
            largest = max(largest, sum(len(str(x)) for x in r))
            db.execute("INSERT INTO %s VALUES(%s)" % (table, ",".join("?" * len(r))), r)
    db.commit()
    db.close()
    return largest


def transcript(fmt):
    return {"codex": Rollout, "gemini-cli": GeminiChat, "gemini-legacy": GeminiLegacy}.get(fmt, Transcript)()


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


def measured(args, env):
    """Runs a command: its peak RSS (KiB, /usr/bin/time), peak RssAnon (KiB,
    polled every 5 ms), seconds and output."""
    err = tempfile.mktemp(prefix="agent-bench-time-")
    p = subprocess.Popen(["/usr/bin/time", "-o", err, "-f", "%M %e"] + args, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    anon = 0
    while p.poll() is None:
        try:
            for pid in open("/proc/%d/task/%d/children" % (p.pid, p.pid)).read().split():
                for l in open("/proc/%s/status" % pid):
                    if l.startswith("RssAnon:"):
                        anon = max(anon, int(l.split()[1]))
        except OSError:
            pass
        time.sleep(0.005)
    out = p.stdout.read()
    if p.returncode != 0:
        sys.exit("%s failed" % " ".join(args))
    kb, secs = open(err).read().strip().splitlines()[-1].split()
    os.unlink(err)
    return int(kb), anon, float(secs), out.strip()


def regrow(conv, turns, size, fmt="claude-code"):
    d = tempfile.mkdtemp(prefix="agent-bench-")
    try:
        env = dict(os.environ, CONVO_HOME=os.path.join(d, "home"))
        subprocess.run([conv, "init"], env=env, capture_output=True, check=True)
        f = os.path.join(d, (SID if fmt == "claude-code" else "rollout-x") + ".jsonl")
        t = Rollout() if fmt == "codex" else Transcript()
        with open(f, "w") as fh:
            for i in range(turns):
                fh.write(t.pair(i, size))
        args = [conv, "import", f, "--format", fmt]
        a = measured(args, env)
        with open(f, "a") as fh:
            fh.write(t.pair(turns, size))
        b = measured(args + ["--json"], env)
        added = json.loads(b[3])
        added = "; ".join("%s nodes added" % u["nodes"] for u in added["updated"]) or "nothing added"
        print("regrow: file %.1f MB (%d records)\n"
              "  first import: peak RSS %.1f MiB, RssAnon %.1f MiB, %.2f s\n"
              "  re-import of the grown file: peak RSS %.1f MiB, RssAnon %.1f MiB, %.2f s (%s)" % (
                  os.path.getsize(f) / 1e6, 2 * turns + 2, a[0] / 1024, a[1] / 1024, a[2],
                  b[0] / 1024, b[1] / 1024, b[2], added))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def peak_rss(conv, env, d, fmt, turns, size, big):
    """Peak RSS (KiB) and seconds of importing a fresh transcript into a fresh store; the file's
    size and its largest line."""
    home = os.path.join(d, "home-%d-%d" % (turns, big))
    env = dict(env, CONVO_HOME=home)
    subprocess.run([conv, "init"], env=env, capture_output=True, check=True)
    f = os.path.join(d, "%d-%d.%s" % (turns, big, "json" if fmt == "gemini-legacy" else "jsonl"))
    t = transcript(fmt)
    largest = 0
    if fmt == "opencode":
        f = os.path.join(d, "opencode.db")
        largest = opencode_db(f, turns, size, big)
    else:
        with open(f, "w") as fh:
            fh.write(t.head())
            for i in range(turns):
                s = t.pair(i, size, big if (big and i == turns // 2) else 0)
                largest = max([largest] + [len(l) + 1 for l in s.splitlines()])
                fh.write(s)
            fh.write(t.tail())
    fmt = "gemini-cli" if fmt == "gemini-legacy" else fmt
    # /usr/bin/time's peak RSS counts the store's file pages mapped in
    # (SQLite's mmap); RssAnon, polled every 5 ms, is the process's own.
    err = os.path.join(d, "time.txt")
    redact = ["--redact-secrets"] if os.environ.get("CONVO_BENCH_REDACT") else []
    p = subprocess.Popen(["/usr/bin/time", "-o", err, "-f", "%M %e", conv, "import", f, "--format", fmt] + redact,
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    anon = 0
    while p.poll() is None:
        try:
            for pid in os.listdir("/proc/%d/task" % p.pid) and [c for c in open(
                    "/proc/%d/task/%d/children" % (p.pid, p.pid)).read().split()]:
                for l in open("/proc/%s/status" % pid):
                    if l.startswith("RssAnon:"):
                        anon = max(anon, int(l.split()[1]))
        except OSError:
            pass
        time.sleep(0.005)
    if p.returncode != 0:
        sys.exit("convo import failed")
    kb, secs = open(err).read().strip().splitlines()[-1].split()
    size = os.path.getsize(f)
    os.unlink(f)
    shutil.rmtree(home, ignore_errors=True)
    return int(kb), anon, secs, size, largest


def memory(conv, turns, size, big, fmt):
    d = tempfile.mkdtemp(prefix="agent-bench-")
    try:
        env = dict(os.environ)
        base, base_anon, _, _, _ = peak_rss(conv, env, d, fmt, 1, size, 0)
        kb, anon, secs, fsize, largest = peak_rss(conv, env, d, fmt, turns, size, big)
        above = (kb - base) / 1024
        above_anon = (anon - base_anon) / 1024
        print("memory (%s): file %.1f MB, largest record %.3f MB, %s s\n"
              "  peak RSS %.1f MiB, baseline %.1f MiB: above it %.1f MiB = %.2fx the largest record, %.2fx the file\n"
              "  peak RssAnon %.1f MiB, baseline %.1f MiB: above it %.1f MiB = %.2fx the largest record, %.2fx the file" % (
                  fmt, fsize / 1e6, largest / 1e6, secs,
                  kb / 1024, base / 1024, above, above * 2**20 / largest, above * 2**20 / fsize,
                  anon / 1024, base_anon / 1024, above_anon, above_anon * 2**20 / largest,
                  above_anon * 2**20 / fsize))
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "watch":
        watch(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 40)
    elif len(sys.argv) >= 5 and sys.argv[1] == "regrow":
        regrow(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else "claude-code")
    elif len(sys.argv) >= 5 and sys.argv[1] == "memory":
        memory(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]) if len(sys.argv) > 5 else 0,
               sys.argv[6] if len(sys.argv) > 6 else "claude-code")
    else:
        sys.exit(__doc__)
