"""Checkpoints given by their parent's (`p`, `a`) and the snapshots between
them read back the same through a saver that has nothing cached; such a
saver reads the latest checkpoint from the ends of the timelines."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

import convo
import convo.langgraph as lg
from convo.langgraph import ConvoSaver, _values
from convo.langgraph import _index as ix


def echo(saver: ConvoSaver) -> Any:
    graph = StateGraph(MessagesState).add_node("echo", lambda s: {"messages": [AIMessage("ok")]})
    return graph.add_edge(START, "echo").add_edge("echo", END).compile(checkpointer=saver)


def history(app: Any, cfg: Any) -> list[tuple[str, list[str]]]:
    return [
        (s.config["configurable"]["checkpoint_id"], [m.content for m in s.values["messages"]])
        for s in app.get_state_history(cfg)
    ]


def test_deltas_and_snapshots_read_back_cold(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_values, "SNAPSHOT_EVERY", 4)
    cfg: Any = {"configurable": {"thread_id": "c"}}
    with convo.Store(store_url) as store:
        app = echo(ConvoSaver(store))
        for i in range(5):
            app.invoke({"messages": [HumanMessage(f"m{i}")]}, cfg)
        warm = history(app, cfg)
        # A new saver reads every checkpoint from the store.
        cold = history(echo(ConvoSaver(store)), cfg)
        nodes = store.timeline("c").nodes
    assert cold == warm
    assert warm[0][1] == [x for i in range(5) for x in (f"m{i}", "ok")]
    assert len(warm) == 15
    marks = [
        bool(n.diagnostics["langgraph"].get("delta"))
        for n in nodes
        if "checkpoint" in (n.diagnostics or {}).get("langgraph", {})
    ]
    # Most give their values by their parent's; no chain of them is longer
    # than SNAPSHOT_EVERY - 1 (then one holds every value whole).
    assert sum(marks) >= 9, marks
    runs = "".join("d" if m else "." for m in marks).split(".")
    assert max(len(r) for r in runs) == 3, marks


def test_a_new_saver_reads_the_latest_from_the_ends(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A saver with nothing cached reads the latest checkpoint from the end
    of its timelines (not the whole thread): values, writes and a fork's
    checkpoint as the first saver has them; an older one by id and a
    listing read the thread whole; a put after a cold read goes on."""
    monkeypatch.setattr(_values, "SNAPSHOT_EVERY", 6)
    monkeypatch.setattr(lg, "END_READ", 4)
    cfg: Any = {"configurable": {"thread_id": "e"}}
    with convo.Store(store_url) as store:
        warm = echo(ConvoSaver(store))
        for i in range(8):
            warm.invoke({"messages": [HumanMessage(f"m{i}")]}, cfg)
        first = history(warm, cfg)

        cold_saver = ConvoSaver(store)
        cold = echo(cold_saver)
        latest = cold.get_state(cfg)
        th = cold_saver._threads["e"]
        assert not th.complete
        # Only a few nodes were read back: not the thread.
        assert len(th.checkpoints) < len(first) // 2, len(th.checkpoints)
        assert latest.config["configurable"]["checkpoint_id"] == first[0][0]
        assert [m.content for m in latest.values["messages"]] == first[0][1]

        # An older checkpoint by id: the thread is read whole.
        old_id, old_messages = first[-5]
        old = cold.get_state({"configurable": {"thread_id": "e", "checkpoint_id": old_id}})
        assert [m.content for m in old.values["messages"]] == old_messages
        assert th.complete
        assert history(cold, cfg) == first

        # A third saver: a cold read, then the graph goes on from it.
        again_saver = ConvoSaver(store)
        again = echo(again_saver)
        again.invoke({"messages": [HumanMessage("m8")]}, cfg)
        assert not again_saver._threads["e"].complete
        after = history(echo(ConvoSaver(store)), cfg)
    assert after[0][1] == first[0][1] + ["m8", "ok"]
    assert after[3:] == first


def test_a_cold_read_takes_the_newest_fork(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The newest checkpoint of a thread with a fork is the fork's, and a
    cold read finds it (and the writes still pending on it)."""
    monkeypatch.setattr(lg, "END_READ", 3)
    cfg: Any = {"configurable": {"thread_id": "f"}}
    with convo.Store(store_url) as store:
        saver = ConvoSaver(store)
        app = echo(saver)
        for i in range(3):
            app.invoke({"messages": [HumanMessage(f"m{i}")]}, cfg)
        early = history(app, cfg)[-3][0]
        forked = app.update_state(
            {"configurable": {"thread_id": "f", "checkpoint_id": early}},
            {"messages": [HumanMessage("edited")]},
        )
        saver.put_writes(forked, [("messages", [HumanMessage("pending")])], "task-1")
        warm = saver.get_tuple(cfg)
        assert warm is not None
        assert {b.name for b in store.branches("f")} >= {"main", "fork-1"}
        cold = ConvoSaver(store).get_tuple(cfg)
    assert cold is not None
    assert cold.config == warm.config == forked
    assert cold.checkpoint["channel_values"] == warm.checkpoint["channel_values"]
    assert [(t, c, [m.content for m in v]) for t, c, v in cold.pending_writes or []] == [
        ("task-1", "messages", ["pending"])
    ]


def test_writes_read_before_their_checkpoint_are_taken_when_it_is() -> None:
    """A timeline read from its end: a writes node whose checkpoint lies
    further back waits until a read further back finds the checkpoint;
    the timeline's last checkpoint stays the newest one."""

    def node(h: str, d: dict[str, Any], depth: int) -> dict[str, Any]:
        return {"hash": h, "seq": depth, "depth": depth, "diagnostics": {"langgraph": d}}

    def writes(h: str, cp: str, depth: int) -> dict[str, Any]:
        d = {"writes_for": cp, "ns": "", "task_id": "t", "writes": [[0, "messages"]]}
        return node(h, d, depth)

    nodes = [
        node("root", {"thread": "x"}, 1),
        node("a", {"checkpoint": "1", "parent": None, "ns": "", "metadata": {}}, 2),
        writes("wa", "1", 3),
        node("b", {"checkpoint": "2", "parent": "1", "ns": "", "metadata": {}, "delta": True}, 4),
        writes("wb", "2", 5),
    ]
    th = ix.Thread("x", "ses-x", complete=False)
    t = th.timeline("main")
    th.take_end(t, nodes[2:], total=5)
    assert (t.lo, t.length, t.head, t.last) == (2, 5, "wb", "2")
    assert [n for n, _ in th.orphans] == ["wa"]
    assert list(th.checkpoints[("", "2")].writes) == [("t", 0)]
    assert th.newest("") is th.checkpoints[("", "2")]
    th.take_before(t, nodes[:2])
    assert (t.lo, t.last, th.root, th.orphans) == (0, "2", "root", [])
    assert th.checkpoints[("", "1")].writes[("t", 0)].node == "wa"
    assert th.appends_at("", "2", "3") and not th.appends_at("", "1", "3")


def timeline_reads(saver: ConvoSaver, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The queries of the timeline reads `saver` makes from now on."""
    reads: list[dict[str, Any]] = []
    api = saver._api

    def counted(method: str, path: str, payload: Any = None, **kw: Any) -> Any:
        if path.endswith("/timeline"):
            reads.append(dict(kw.get("query") or {}))
        return api(method, path, payload, **kw)

    monkeypatch.setattr(saver, "_api", counted)
    return reads


def test_a_cold_read_goes_to_the_base_of_the_chain_at_once(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint given by its parent's names (`delta`) the depth of the
    node its chain of payloads starts from (a checkpoint holding its values
    whole): a saver with nothing cached reads the timeline's end, then the
    timeline from there in one read, however short its first read."""
    monkeypatch.setattr(_values, "SNAPSHOT_EVERY", 12)
    monkeypatch.setattr(lg, "END_READ", 2)
    cfg: Any = {"configurable": {"thread_id": "b"}}
    with convo.Store(store_url) as store:
        warm = echo(ConvoSaver(store))
        for i in range(6):
            warm.invoke({"messages": [HumanMessage(f"m{i}")]}, cfg)
        first = history(warm, cfg)
        nodes = store.timeline("b").nodes
        by_depth = {i + 1: n for i, n in enumerate(nodes)}
        marks = [
            (n.diagnostics or {}).get("langgraph", {})
            for n in nodes
            if "checkpoint" in (n.diagnostics or {}).get("langgraph", {})
        ]
        bases = [d["delta"] for d in marks if "delta" in d]
        assert len(bases) >= 12 and all(type(b) is int for b in bases), bases
        for b in set(bases):
            d = by_depth[b].diagnostics["langgraph"]
            assert "checkpoint" in d and "delta" not in d, d
        base = marks[-1]["delta"]
        assert type(base) is int and base < len(nodes) - 2, base

        cold_saver = ConvoSaver(store)
        reads = timeline_reads(cold_saver, monkeypatch)
        latest = echo(cold_saver).get_state(cfg)
    assert [m.content for m in latest.values["messages"]] == first[0][1]
    assert [(r["cursor"], r["limit"]) for r in reads] == [
        (-2, 2),
        (base - 1, len(nodes) - 2 - (base - 1)),
    ]


def test_a_chain_without_its_base_is_read_back_page_by_page(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpoints given by their parent's that do not say where their
    chain starts (`delta: true`, as an earlier version wrote them) are read
    back from the timeline's end in reads of `BACK_READ` nodes or as many
    again as were read, until the chain's first checkpoint."""
    monkeypatch.setattr(_values, "SNAPSHOT_EVERY", 12)
    monkeypatch.setattr(lg, "END_READ", 2)
    monkeypatch.setattr(lg, "BACK_READ", 3)
    cfg: Any = {"configurable": {"thread_id": "o"}}
    with convo.Store(store_url) as store:
        with monkeypatch.context() as old:
            old.setattr(ix.Thread, "chain_base", lambda self, cp: 0)
            warm = echo(ConvoSaver(store))
            for i in range(6):
                warm.invoke({"messages": [HumanMessage(f"m{i}")]}, cfg)
            first = history(warm, cfg)
        nodes = store.timeline("o").nodes
        marks = [(n.diagnostics or {}).get("langgraph", {}).get("delta") for n in nodes]
        assert True in marks and not any(type(m) is int for m in marks), marks
        cold_saver = ConvoSaver(store)
        reads = timeline_reads(cold_saver, monkeypatch)
        latest = echo(cold_saver).get_state(cfg)
    assert [m.content for m in latest.values["messages"]] == first[0][1]
    limits = [r["limit"] for r in reads]
    assert limits[:3] == [2, 3, 5], limits
    assert len(reads) >= 3
