"""The pytest plugin, end to end: a sample project (sample/) whose tests
call the openai, anthropic, langchain and openai-agents clients, run with
each record mode against a scripted upstream, then with the upstream gone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from upstream import Upstream

SAMPLE = Path(__file__).parent / "sample"
MARKED = 6  # marked tests in sample/check_agents.py
CALLS = 6  # upstream calls they make


@pytest.fixture
def project(tmp_path: Path) -> Path:
    dest = tmp_path / "sample"
    shutil.copytree(SAMPLE, dest, ignore=shutil.ignore_patterns("recordings", "__pycache__"))
    return dest


def run(project: Path, up_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ)
    e.update(
        OPENAI_BASE_URL=up_url + "/v1",
        ANTHROPIC_BASE_URL=up_url,
        OPENAI_API_KEY="sk-test",
        ANTHROPIC_API_KEY="sk-ant-test",
        PYTHONDONTWRITEBYTECODE="1",
    )
    e.update(env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=project,
        env=e,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def recorded(project: Path, upstream: Upstream) -> Iterator[Path]:
    r = run(project, upstream.url)
    assert r.returncode == 0, r.stdout + r.stderr
    assert upstream.calls == CALLS
    yield project


def recordings(project: Path) -> list[Path]:
    return sorted((project / "recordings" / "check_agents").glob("*.jsonl"))


def test_once_records_then_replays_with_the_upstream_gone(recorded: Path) -> None:
    files = recordings(recorded)
    assert [f.stem for f in files] == sorted(
        [
            "test_anthropic_async_stream",
            "test_anthropic_sync",
            "test_langchain",
            "test_openai_agents",
            "test_openai_async_stream",
            "test_openai_sync",
        ]
    )
    first = json.loads(files[0].read_text().splitlines()[0])
    assert first["format"] == "convo.recording.v1"
    before = {f: f.read_bytes() for f in files}
    # The upstream is gone (nothing listens there): every call is replayed,
    # in parallel workers too.
    for args in (["--convo-record-mode=none"], ["--convo-record-mode=none", "-n", "2"]):
        r = run(recorded, "http://127.0.0.1:9", *args)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"{MARKED + 1} passed" in r.stdout
    assert {f: f.read_bytes() for f in files} == before


def test_a_changed_prompt_fails_naming_the_call_and_what_differs(recorded: Path) -> None:
    r = run(
        recorded,
        "http://127.0.0.1:9",
        "--convo-record-mode=none",
        "-k",
        "test_openai_sync",
        SAMPLE_CITY="Rome",
    )
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout
    assert "check_agents.py::test_openai_sync: replaying" in out
    assert "call #1 (turn 1, sequence 1) does not match the recording" in out
    assert "/body/messages/0/content: recorded" in out
    assert "Paris" in out and "Rome" in out


def test_none_without_a_recording_says_so(project: Path) -> None:
    r = run(project, "http://127.0.0.1:9", "--convo-record-mode=none", "-k", "test_langchain")
    assert r.returncode == 1
    assert "no convo recording at" in r.stdout and "--convo-record-mode=once" in r.stdout


def test_a_hand_edited_recording_is_refused(recorded: Path) -> None:
    f = recorded / "recordings" / "check_agents" / "test_openai_sync.jsonl"
    lines = f.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"kind":"response"' in line)
    lines[at] = lines[at].replace("Paris", "Lyon")
    f.write_text("\n".join(lines) + "\n")
    r = run(recorded, "http://127.0.0.1:9", "--convo-record-mode=none", "-k", "test_openai_sync")
    assert r.returncode == 1
    assert f"line {at + 1}" in r.stdout and "edited" in r.stdout


def test_new_episodes_records_the_new_call_on_a_fork(recorded: Path, upstream: Upstream) -> None:
    calls = upstream.calls
    r = run(
        recorded,
        upstream.url,
        "--convo-record-mode=new_episodes",
        "-k",
        "test_openai_sync",
        SAMPLE_EXTRA="1",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert upstream.calls == calls + 1  # only the new call went live
    lines = (recorded / "recordings/check_agents/test_openai_sync.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    assert "museums" in "".join(lines)
    # The first call stays recorded; the new one was recorded on a fork (a
    # live timeline, then made main) or after the recording's end.
    assert any(b["name"] == "main" for b in header["branches"])
    r = run(
        recorded,
        "http://127.0.0.1:9",
        "--convo-record-mode=none",
        "-k",
        "test_openai_sync",
        SAMPLE_EXTRA="1",
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_all_records_again(recorded: Path, upstream: Upstream) -> None:
    calls = upstream.calls
    r = run(recorded, upstream.url, "--convo-record-mode=all", "-k", "test_anthropic_sync")
    assert r.returncode == 0, r.stdout + r.stderr
    assert upstream.calls == calls + 1
