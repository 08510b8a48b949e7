"""convo.Store against a real `convo serve` child."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path

import pytest
from upstream import Upstream

import convo


def _turn(store: convo.Store, session: str, question: str, branch: str = "main") -> None:
    store.append(
        session,
        [
            convo.Line("invoke", question),
            convo.Line("request", json.dumps({"q": question})),
            convo.Line("response", b"\xff\x00binary", diagnostics={"status": 200}),
            convo.Line("complete", "answer to " + question),
        ],
        branch=branch,
    )


def test_sessions_timelines_and_nodes(store: convo.Store) -> None:
    s = store.new_session("bot", "trip")
    assert s.id.startswith("ses-") and s.title == "trip"
    _turn(store, "trip", "Paris?")
    t = store.timeline("trip")
    assert [n.kind for n in t.nodes] == ["invoke", "request", "response", "complete"]
    assert t.turns == 1
    assert t.nodes[0].text == "Paris?" and t.nodes[0].turn == 1
    assert t.nodes[2].payload == b"\xff\x00binary"
    assert t.nodes[2].diagnostics == {"status": 200}
    assert t.nodes[1].json() == {"q": "Paris?"}
    assert store.node(t.nodes[3].hash[:12]).text == "answer to Paris?"
    assert [x.id for x in store.sessions()] == [s.id]
    assert store.session(s.id[:12]).title == "trip"
    assert store.retitle("trip", "voyage").title == "voyage"


def test_fork_promote_and_diff(store: convo.Store) -> None:
    store.new_session("bot", "f")
    _turn(store, "f", "one")
    forked = store.fork("f", "main", "alt")
    assert forked.branch.name == "alt" and forked.node.kind == "fork"
    _turn(store, "f", "two", branch="alt")
    assert sorted(b.name for b in store.branches("f")) == ["alt", "main"]
    diff = store.diff("f", "main", "alt")
    assert diff["b"]["count"] > 0
    promoted = store.promote("f", "alt")
    assert promoted.sealed_as.startswith("broken-")
    assert len(store.timeline("f").nodes) == 1 + 4 + 4 + 1
    with pytest.raises(convo.RefusedError) as e:
        store.record("f", "invoke", "x", branch=promoted.sealed_as)
    assert e.value.kind == "refused"


def test_state(store: convo.Store) -> None:
    store.new_session("bot", "st")
    root = store.state_put("st", "greeting", "hello")
    store.state_put("st", "blob", b"\xff\x00")
    assert len(root) == 64
    assert store.state_get("st", "greeting") == b"hello"
    assert store.state_get("st", "missing") is None
    view = store.state("st")
    assert view.entries == {"blob": b"\xff\x00", "greeting": b"hello"}
    assert store.state_delete("st", "blob") is True
    assert store.state_delete("st", "blob") is False


def test_errors_carry_convo_kinds(store: convo.Store) -> None:
    with pytest.raises(convo.NotFoundError) as nf:
        store.session("nothing-like-this")
    assert nf.value.kind == "not_found" and nf.value.status == 404
    store.new_session("bot", "e")
    with pytest.raises(convo.InvalidError) as bad:
        store.record("e", "banana", "x")
    assert bad.value.kind == "invalid"
    with pytest.raises(convo.NotFoundError) as cli:
        store.export("nothing-like-this")
    assert cli.value.exit_code == 3


def test_verify_and_search(store: convo.Store) -> None:
    store.new_session("bot", "v")
    _turn(store, "v", "population of Lyon")
    report = store.verify()
    assert report.ok and report.nodes == 4 and report.problems == []
    hits = store.search("Lyon")
    assert hits and hits[0].node.session == store.session("v").id
    assert hits[0].branches == ["main"]


def test_recording_round_trips_hash_exact(store: convo.Store, tmp_path: Path) -> None:
    store.new_session("bot", "r")
    _turn(store, "r", "one")
    store.fork("r", "main", "alt")
    _turn(store, "r", "two", branch="alt")
    store.state_put("r", "k", b"\x00v")
    _turn(store, "r", "three")
    exported = store.export("r")
    lines = exported.decode().splitlines()
    assert json.loads(lines[0])["format"] == "convo.recording.v1"
    assert sum(1 for line in lines if '"hash"' in line) == 4 + 1 + 4 + 4
    with convo.Store(tmp_path / "other.db") as other:
        got = other.import_(exported)
        assert [i.created for i in got] == [True]
        assert other.export("r") == exported
        assert other.state("r").entries == {"k": b"\x00v"}
        assert other.verify().ok
        assert [i.created for i in other.import_(exported)] == [False]


def test_a_hand_edited_recording_is_refused_naming_the_line(
    store: convo.Store, tmp_path: Path
) -> None:
    store.new_session("bot", "h")
    _turn(store, "h", "Paris?")
    lines = store.export("h").decode().splitlines()
    lines[2] = lines[2].replace("Paris", "Rome")
    with convo.Store(tmp_path / "other.db") as other, pytest.raises(convo.InvalidError) as e:
        other.import_(("\n".join(lines) + "\n").encode())
    assert "line 3" in e.value.message and "edited" in e.value.message
    assert other.sessions() == []


def test_async_store(tmp_path: Path) -> None:
    async def main() -> list[str]:
        async with convo.AsyncStore(tmp_path / "a.db") as s:
            await s.new_session("bot", "a")
            await asyncio.gather(*(s.record("a", "invoke", f"q{i}", branch="main") for i in [1]))
            t = await s.timeline("a")
            return [n.text for n in t.nodes]

    assert asyncio.run(main()) == ["q1"]


def test_record_and_replay_context_managers(
    upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import openai

    db = tmp_path / "rr.db"
    monkeypatch.setenv("OPENAI_BASE_URL", upstream.url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with convo.record(session="trip", store=db) as rec:
        assert rec.ready_ms > 0
        assert os.environ["OPENAI_BASE_URL"] == rec.openai_base_url
        r = openai.OpenAI().chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        assert r.choices[0].message.content == "You asked: hi"
    assert os.environ["OPENAI_BASE_URL"] == upstream.url + "/v1"
    assert upstream.calls == 1
    with convo.Store(db) as s:
        kinds = [n.kind for n in s.timeline(rec.session).nodes]
        assert "request" in kinds and "response" in kinds
    with convo.replay("trip", store=db):
        with pytest.raises(openai.BadRequestError) as miss:
            openai.OpenAI().chat.completions.create(
                model="m", messages=[{"role": "user", "content": "bye"}]
            )
        assert "/body/messages/0/content" in str(miss.value)
        r = openai.OpenAI().chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        assert r.choices[0].message.content == "You asked: hi"
    assert upstream.calls == 1


def test_a_request_whose_connection_broke_is_sent_again(store: convo.Store) -> None:
    """A keep-alive connection the server (or anything between) cut is
    replaced: before the request is sent, and after, while its answer is
    still to be read (a read sent ahead, as the LangGraph saver does)."""
    s = store.new_session("bot", "again")
    api = store._http()
    conn = api._conn()
    assert conn._sock is not None
    conn._sock.shutdown(socket.SHUT_RDWR)
    assert [x.id for x in store.sessions()] == [s.id]
    pending = api.send("GET", f"/api/v1/sessions/{s.id}/branches")
    cut = api._conn()._sock
    assert cut is not None
    cut.shutdown(socket.SHUT_RDWR)
    assert [b["name"] for b in pending.json()] == ["main"]
    assert api._conn()._sock is not cut
