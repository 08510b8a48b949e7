"""A Python client generated from convo's OpenAPI document, against a live
`convo serve` (run by the Rust test `test_security::openapi_document_is_valid_fuzzed_and_makes_a_client`):

    python openapi_client.py OPENAPI_JSON BASE_URL WORKDIR SESSION_ID

It generates the client with openapi-python-client (no hand-written
code), then lists the sessions and reads a timeline page through it, and
checks what it got. Exits non-zero with a message on the first thing that
is wrong.
"""

import re
import os
import shutil
import subprocess
import sys


def fail(msg):
    print("openapi_client: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    doc, base, workdir, sid = sys.argv[1:5]
    # `--meta none` writes the package itself into OUT.
    out = os.path.join(workdir, "convo_client")
    shutil.rmtree(out, ignore_errors=True)
    gen = os.path.join(os.path.dirname(sys.executable), "openapi-python-client")
    # No formatter run after generating (ruff is not a test dependency).
    config = os.path.join(workdir, "openapi-python-client.yaml")
    with open(config, "w") as f:
        f.write("post_hooks: []\n")
    r = subprocess.run([gen, "generate", "--path", doc, "--output-path", out, "--meta", "none",
                        "--config", config],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail("generation failed:\n%s\n%s" % (r.stdout, r.stderr))
    said = r.stdout + r.stderr
    # The OTLP receiver's routes take OTLP's protobuf encoding, which a
    # generated JSON client does not speak (OTLP exporters call them); any
    # other part of the document skipped fails.
    warned = re.findall(r"WARNING parsing (\w+) (\S+)", said)
    skipped = [w for w in warned if w[1] not in ("/v1/traces", "/v1/logs")]
    if skipped or ("Warning" in said and not warned):
        fail("the generator skipped part of the document:\n%s\n%s" % (r.stdout, r.stderr))
    sys.path.insert(0, workdir)
    import importlib
    pkg = importlib.import_module("convo_client")
    client = pkg.Client(base_url=base, raise_on_unexpected_status=True)
    api = importlib.import_module(pkg.__name__ + ".api")
    modules = {}
    for tag in os.listdir(os.path.dirname(api.__file__)):
        if tag.startswith("_") or tag.endswith(".py"):
            continue
        for mod in os.listdir(os.path.join(os.path.dirname(api.__file__), tag)):
            if mod.endswith(".py") and not mod.startswith("_"):
                name = mod[:-3]
                modules[name] = importlib.import_module("%s.api.%s.%s" % (pkg.__name__, tag, name))
    for need in ("list_sessions", "timeline"):
        if need not in modules:
            fail("no `%s` operation in the client (have %s)" % (need, sorted(modules)))
    listed = modules["list_sessions"].sync(client=client, limit=10)
    if listed is None or listed.total != 1 or listed.sessions[0].id != sid:
        fail("list_sessions: %r" % (listed,))
    page = modules["timeline"].sync(session=sid, branch="main", client=client, cursor=0, limit=5)
    if page is None or page.total < 2 or len(page.nodes) != min(5, page.total):
        fail("timeline: %r" % (page,))
    if page.nodes[0].kind != "invoke" or len(page.nodes[0].hash_) != 64:
        fail("timeline's first node: %r" % (page.nodes[0],))
    # An error comes back as the documented ErrorDoc.
    missing = modules["get_session"].sync_detailed(session="no-such-session", client=client) \
        if "get_session" in modules else None
    if missing is not None and missing.status_code != 404:
        fail("get_session of a missing session: %r" % (missing,))
    print("openapi_client: ok (%d sessions, %d nodes on main)" % (listed.total, page.total))


if __name__ == "__main__":
    main()
