"""What the savers drop is erased from disk: `delete_thread` and `prune`
leave no copy of the thread's content in any file of the store's folder
(SQLite, write-ahead log folded), the store still verifies, and what
another thread shares survives."""

from __future__ import annotations

import operator
import os
import sqlite3
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

import convo
from convo.langgraph import ConvoSaver


def holding(folder: Path, needle: bytes) -> list[str]:
    """The files of `folder` whose bytes hold `needle`, write-ahead logs
    folded first."""
    for db in folder.glob("*.db"):
        with sqlite3.connect(db) as c:
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sorted(p.name for p in folder.iterdir() if p.is_file() and needle in p.read_bytes())


def distinctive() -> tuple[bytes, str]:
    """A word found nowhere else, in a text too long and random to be
    stored deflated (so it is in the files until erased)."""
    word = f"zebra{uuid.uuid4().hex}"
    return word.encode(), f"{word} {os.urandom(12_000).hex()}"


def echo_graph(saver: ConvoSaver) -> Any:
    graph = StateGraph(MessagesState).add_node("echo", lambda s: {"messages": [AIMessage("ok")]})
    return graph.add_edge(START, "echo").add_edge("echo", END).compile(checkpointer=saver)


def test_delete_thread_erases_its_content(tmp_path: Path) -> None:
    word, text = distinctive()
    gone: Any = {"configurable": {"thread_id": "gone"}}
    kept: Any = {"configurable": {"thread_id": "kept"}}
    with convo.Store(tmp_path / "convo.db") as store:
        saver = ConvoSaver(store)
        app = echo_graph(saver)
        app.invoke({"messages": [HumanMessage(text)]}, gone)
        app.invoke({"messages": [HumanMessage("hello")]}, kept)
        saver.copy_thread("gone", "copy")
        assert holding(tmp_path, word) == ["convo.db"]
        saver.delete_thread("copy")
        # The copy shares the source's payloads: they stay for it.
        assert holding(tmp_path, word) == ["convo.db"]
        saver.delete_thread("gone")
        assert saver.get_tuple(gone) is None
        assert [m.content for m in app.get_state(kept).values["messages"]] == ["hello", "ok"]
        assert store.verify().ok
        titles = {s.title for s in store.sessions(agent="langgraph")}
        assert titles == {"kept", "[redacted]"}
    assert holding(tmp_path, word) == []


class Noted(TypedDict):
    note: str
    log: Annotated[list[str], operator.add]


def test_prune_erases_what_it_drops(tmp_path: Path) -> None:
    word, text = distinctive()
    cfg: Any = {"configurable": {"thread_id": "t"}}
    graph = StateGraph(Noted).add_node("n", lambda s: {"log": ["seen"]})
    graph.add_edge(START, "n").add_edge("n", END)
    with convo.Store(tmp_path / "convo.db") as store:
        saver = ConvoSaver(store)
        app = graph.compile(checkpointer=saver)
        app.invoke({"note": text, "log": []}, cfg)
        app.invoke({"note": "short", "log": []}, cfg)
        assert holding(tmp_path, word) == ["convo.db"]
        saver.prune(["t"])
        state = app.get_state(cfg)
        assert state.values == {"note": "short", "log": ["seen", "seen"]}
        assert len(list(saver.list(cfg))) == 1
        assert store.verify().ok
    assert holding(tmp_path, word) == []
