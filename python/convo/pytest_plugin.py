"""The pytest plugin: `@pytest.mark.convo` records a test's LLM calls
into a text recording and replays them on later runs.

    @pytest.mark.convo
    def test_trip():
        client = openai.OpenAI()
        assert "Paris" in client.chat.completions.create(...).choices[0].message.content

`--convo-record-mode` (or the ini option `convo_record_mode`), as
pytest-recording's `--record-mode`:

- `once` (default): replay when the recording exists, record otherwise;
- `none`: replay only; a call not recorded fails the test (CI);
- `new_episodes`: replay what matches, record the rest live on a fork of
  the recording, which then becomes its `main`;
- `all`: record again.

Each test's recording is `{test file's folder}/recordings/{module}/{test}.jsonl`
(the ini option `convo_recordings_dir`, relative to the rootdir, moves
the `recordings` folder; the marker's `path=` names one file). A
recording is `convo export --format recording`: one JSON line per node
with its hash; loading it checks every hash. Each test gets its own
temporary store and proxy (pytest-xdist safe); files are written whole
(a temporary file renamed into place).

Marker options: `@pytest.mark.convo(match_ignore=["/body/temperature"],
record_mode="none", path="...")`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Generator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from convo.recording import Recording, record, replay
from convo.store import Store

MODES = ("once", "none", "new_episodes", "all")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("convo", "convo recordings of LLM calls")
    group.addoption(
        "--convo-record-mode",
        choices=MODES,
        default=None,
        help="once (default): replay if recorded, else record; none: replay only; "
        "new_episodes: record what does not match on a fork; all: record again",
    )
    parser.addini("convo_record_mode", "default --convo-record-mode", default="once")
    parser.addini(
        "convo_recordings_dir",
        "folder of the recordings, relative to the rootdir "
        "(default: recordings/ beside each test file)",
        default="",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "convo(match_ignore=None, record_mode=None, path=None): record the test's LLM calls "
        "with convo and replay them on later runs",
    )


@dataclass
class _Run:
    """What the plugin knows about one marked test while it runs."""

    path: Path
    mode: str
    store: Store
    tmp: str
    recording: Recording | None = None
    replayed: bool = False
    misses: list[dict[str, Any]] = field(default_factory=list)


def recording_path(item: pytest.Item, override: str | None = None) -> Path:
    """Where `item`'s recording lives."""
    if override:
        return Path(str(item.config.rootpath), override)
    module = Path(str(item.path)).stem
    name = re.sub(r"[^\w.\-\[\]]+", "_", item.name)
    configured = item.config.getini("convo_recordings_dir")
    base = (
        Path(str(item.config.rootpath), configured)
        if configured
        else Path(str(item.path)).parent / "recordings"
    )
    return base / module / f"{name}.jsonl"


def _mode(item: pytest.Item, marker: pytest.Mark) -> str:
    mode = (
        marker.kwargs.get("record_mode")
        or item.config.getoption("--convo-record-mode")
        or item.config.getini("convo_record_mode")
    )
    if mode not in MODES:
        raise pytest.UsageError(f"convo record mode `{mode}`: use one of {', '.join(MODES)}")
    return str(mode)


def _header(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        first = f.readline()
    try:
        head: dict[str, Any] = json.loads(first)
        return head
    except ValueError as e:
        raise pytest.fail(f"{path}: line 1 is not a convo recording: {e}", pytrace=False) from e


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    marker = item.get_closest_marker("convo")
    if marker is None:
        return (yield)
    path = recording_path(item, marker.kwargs.get("path"))
    mode = _mode(item, marker)
    if mode == "none" and not path.exists():
        pytest.fail(
            f"{item.nodeid}: no convo recording at {path}; record it with "
            "`pytest --convo-record-mode=once` and commit the file",
            pytrace=False,
        )
    tmp = tempfile.mkdtemp(prefix="convo-test-")
    run = _Run(path, mode, Store(os.path.join(tmp, "convo.db")), tmp)
    try:
        with ExitStack() as stack:
            run.recording = stack.enter_context(_context(item, run, marker))
            try:
                outcome = yield
            finally:
                stack.close()
                _collect_misses(run)
        _save(item, run)
        _fail_on_miss(item, run)
        return outcome
    except BaseException:
        _fail_on_miss(item, run)
        raise
    finally:
        run.store.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _context(item: pytest.Item, run: _Run, marker: pytest.Mark) -> Any:
    ignore = list(marker.kwargs.get("match_ignore") or [])
    if run.mode != "all" and run.path.exists():
        run.replayed = True
        run.store.import_(run.path)
        session = _header(run.path)["session"]["id"]
        if run.mode == "new_episodes":
            return replay(session, on_miss="live", store=run.store, match_ignore=ignore)
        return replay(session, on_miss="error", store=run.store, match_ignore=ignore)
    return record(item.nodeid, store=run.store)


def _collect_misses(run: _Run) -> None:
    if run.recording is None:
        return
    for line in run.recording.stderr.splitlines():
        if '"replay miss"' not in line:
            continue
        try:
            run.misses.append(json.loads(line))
        except ValueError:
            continue


def _save(item: pytest.Item, run: _Run) -> None:
    """Writes the recording after a test that recorded something."""
    rec = run.recording
    if rec is None or run.mode == "none" or (run.replayed and run.mode == "once"):
        return
    try:
        session = run.store.session(rec.session)
    except Exception:
        # Nothing was called: no session, nothing to write.
        return
    if run.replayed:
        live = [b.name for b in run.store.branches(session.id) if b.name.startswith("live-")]
        if live:
            # The new episode becomes the recording's main: the next run replays it.
            run.store.promote(session.id, sorted(live)[-1])
    run.path.parent.mkdir(parents=True, exist_ok=True)
    run.store.cli("export", session.id, "--format", "recording", "-o", str(run.path))


def _fail_on_miss(item: pytest.Item, run: _Run) -> None:
    if not run.misses or run.mode == "new_episodes":
        return
    requests = _recorded_requests(run)
    parts = []
    for miss in run.misses:
        index = miss.get("recorded_call")
        where = ""
        if isinstance(index, int) and index < len(requests):
            turn, seq = requests[index]
            where = f" (turn {turn}, sequence {seq})"
        if miss.get("code") == "replay_exhausted":
            parts.append("a call beyond the recording: every recorded call was already answered")
            continue
        lines = [f"call #{(index or 0) + 1}{where} does not match the recording:"]
        for v in miss.get("values") or []:
            recorded, received = _around(v.get("recorded"), v.get("received"))
            lines.append(f"  {v.get('pointer')}: recorded {recorded}, received {received}")
        parts.append("\n".join(lines))
    pytest.fail(
        f"{item.nodeid}: replaying {run.path}\n"
        + "\n".join(parts)
        + "\n(re-record with --convo-record-mode=all, or add the new calls with "
        "--convo-record-mode=new_episodes)",
        pytrace=False,
    )


def _recorded_requests(run: _Run) -> list[tuple[int | None, int | None]]:
    try:
        session = _header(run.path)["session"]["id"]
        nodes = run.store.timeline(session).nodes
    except Exception:
        return []
    return [(n.turn, n.sequence) for n in nodes if n.kind == "request"]


def _around(a: Any, b: Any, width: int = 40) -> tuple[str, str]:
    """Both values as JSON; two long strings cut to where they first differ."""
    if not (isinstance(a, str) and isinstance(b, str)) or max(len(a), len(b)) <= 2 * width:
        return _show(a), _show(b)
    i = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(0, i - width)

    def cut(s: str) -> str:
        piece = s[start : i + width]
        return (
            '"'
            + ("…" if start > 0 else "")
            + json.dumps(piece, ensure_ascii=False)[1:-1]
            + ("…" if i + width < len(s) else "")
            + '"'
        )

    return cut(a), cut(b)


def _show(value: Any, width: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"
