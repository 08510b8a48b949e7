"""A LangGraph tool agent (`create_react_agent`) on `ConvoSaver`, against a
scripted model: run, interrupted and resumed, time-travelled (a fork that
`convo branch list` shows), replayed offline from the recorded model
answers; a subgraph; a checkpoint edited behind convo's back."""

from __future__ import annotations

import json
import sqlite3
import sys
import uuid
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

import convo
from convo.langgraph import ConvoSaver

sys.path.insert(0, str(Path(__file__).parent))
from scripted import Model

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@tool
def book(city: str) -> str:
    """Books a trip to a city, once a human said yes."""
    answer = interrupt({"confirm": f"book {city}?"})
    return f"booked {city}" if answer == "yes" else f"not booked ({answer})"


@pytest.fixture
def model() -> Iterator[Model]:
    m = Model()
    yield m
    m.stop()


def agent(saver: ConvoSaver) -> Any:
    llm = ChatOpenAI(model="scripted", api_key="k", max_retries=0)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # moved to langchain.agents in LangGraph 1.0
        return create_react_agent(llm, [weather, book], checkpointer=saver)


def last_text(result: dict[str, Any]) -> str:
    return str(result["messages"][-1].content)


def conversation(saver: ConvoSaver, thread: str) -> list[str]:
    """Runs the scenario; returns what the agent answered at each step."""
    graph = agent(saver)
    cfg: Any = {"configurable": {"thread_id": thread}}
    said = [last_text(graph.invoke({"messages": [HumanMessage("weather Paris")]}, cfg))]
    out = graph.invoke({"messages": [HumanMessage("book Rome")]}, cfg)
    assert "__interrupt__" in out, out
    assert graph.get_state(cfg).next == ("tools",)
    said.append(last_text(graph.invoke(Command(resume="yes"), cfg)))
    # Time travel: the first question, as asked before the model answered it.
    history = list(graph.get_state_history(cfg))
    early = next(
        s for s in reversed(history) if s.next == ("agent",) and len(s.values["messages"]) == 1
    )
    first = early.values["messages"][0]
    edited = graph.update_state(
        early.config, {"messages": [HumanMessage("weather Oslo", id=first.id)]}
    )
    said.append(last_text(graph.invoke(None, edited)))
    return said


def test_run_interrupt_resume_time_travel_replay(store_url: str, model: Model) -> None:
    thread = f"trip-{uuid.uuid4().hex[:8]}"
    with convo.Store(store_url) as store:
        saver = ConvoSaver(store)
        session = saver.session_of(thread)
        with convo.record(thread, branch="llm", store=store, upstream=model.url):
            said = conversation(saver, thread)
        assert said == ["Done: sunny in Paris", "Done: booked Rome", "Done: sunny in Oslo"]
        calls = model.calls
        assert calls == 6

        # One session titled by the thread: checkpoints, the fork and the model calls.
        assert store.session(thread).id == session
        branches = json.loads(store.cli("branch", "list", thread, "--json"))
        names = {
            b["name"] for b in (branches["branches"] if isinstance(branches, dict) else branches)
        }
        assert {"main", "fork-1", "llm"} <= names, names
        graph = store.cli("log", thread, "--graph").decode()
        assert "fork-1" in graph
        # The latest state is the fork's: Oslo replaced Paris, Rome is gone.
        state = agent(saver).get_state({"configurable": {"thread_id": thread}})
        texts = [m.content for m in state.values["messages"]]
        assert texts[0] == "weather Oslo" and "book Rome" not in texts
        # The abandoned timeline still holds Paris and Rome.
        main = [n for n in store.timeline(thread, "main").nodes if n.kind == "invoke"]
        assert len(main) > 5
        assert store.verify().ok

        # Offline: the model is gone; the same run is answered from the recording.
        model.stop()
        with convo.replay(thread, branch="llm", store=store):
            again = conversation(saver, f"{thread}-replayed")
        assert again == said
        assert model.calls == calls


class Inner(MessagesState):
    pass


def test_subgraph_checkpoints_on_their_own_timeline(store_url: str) -> None:
    def ask(state: MessagesState) -> dict[str, Any]:
        answer = interrupt("which city?")
        return {"messages": [AIMessage(f"going to {answer}")]}

    sub = StateGraph(Inner).add_node("ask", ask).add_edge(START, "ask").add_edge("ask", END)
    with convo.Store(store_url) as store:
        saver = ConvoSaver(store)
        parent = (
            StateGraph(MessagesState)
            .add_node("plan", sub.compile())
            .add_edge(START, "plan")
            .add_edge("plan", END)
            .compile(checkpointer=saver)
        )
        cfg: Any = {"configurable": {"thread_id": "sub"}}
        parent.invoke({"messages": [HumanMessage("plan a trip")]}, cfg)
        snap = parent.get_state(cfg, subgraphs=True)
        assert snap.tasks and snap.tasks[0].state is not None
        inner_ns = snap.tasks[0].state.config["configurable"]["checkpoint_ns"]
        assert inner_ns.startswith("plan:")
        out = parent.invoke(Command(resume="Lisbon"), cfg)
        assert out["messages"][-1].content == "going to Lisbon"
        names = {b.name for b in store.branches("sub")}
        assert any(n.startswith("ns-plan") for n in names), names
        inner = list(saver.list({"configurable": {"thread_id": "sub", "checkpoint_ns": inner_ns}}))
        assert inner and all(t.config["configurable"]["checkpoint_ns"] == inner_ns for t in inner)
        assert store.verify().ok


def unsealed(data: bytes) -> bytes:
    """A payload's bytes, inflated when the saver deflated them."""
    magic, _, body = data.partition(b"\n")
    return zlib.decompress(body) if magic.endswith(b"z") else body


def edit(data: bytes, old: bytes, new: bytes) -> bytes:
    """A payload with `old` replaced, sealed again as it was."""
    magic, _, body = data.partition(b"\n")
    if magic.endswith(b"z"):
        return magic + b"\n" + zlib.compress(zlib.decompress(body).replace(old, new))
    return data.replace(old, new)


def edit_checkpoints(db: Path, old: bytes, new: bytes) -> None:
    """Replaces `old` with `new` in every checkpoint payload holding it,
    behind convo's back (at least one must)."""
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT id, data FROM blobs").fetchall()
        edited = [
            (edit(data, old, new), rowid)
            for rowid, data in rows
            if data.startswith(b"convo-langgraph-checkpoint/") and old in unsealed(data)
        ]
        assert edited
        c.executemany("UPDATE blobs SET data = ? WHERE id = ?", edited)


def test_edited_checkpoint_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "convo.db"
    cfg: Any = {"configurable": {"thread_id": "t"}}
    graph = StateGraph(MessagesState).add_node("echo", lambda s: {"messages": [AIMessage("hi")]})
    graph.add_edge(START, "echo").add_edge("echo", END)
    with convo.Store(db) as store:
        app = graph.compile(checkpointer=ConvoSaver(store))
        app.invoke({"messages": [HumanMessage("hello")]}, cfg)
    edit_checkpoints(db, b"hello", b"HELLO")
    with convo.Store(db) as store:
        app = graph.compile(checkpointer=ConvoSaver(store))
        with pytest.raises(convo.ConvoError):
            app.get_state(cfg)
        assert not store.verify().ok


def test_delta_channel_history_matches_the_parent_walk(store_url: str) -> None:
    graph = StateGraph(MessagesState).add_node("echo", lambda s: {"messages": [AIMessage("hi")]})
    graph.add_edge(START, "echo").add_edge("echo", END)
    with convo.Store(store_url) as store:
        saver = ConvoSaver(store)
        app = graph.compile(checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": "delta"}}
        for text in ("one", "two", "three"):
            app.invoke({"messages": [HumanMessage(text)]}, cfg)
        for tup in saver.list(cfg):
            channels = ["messages", "__start__", "missing"]
            ours = saver.get_delta_channel_history(config=tup.config, channels=channels)
            walked = BaseCheckpointSaver.get_delta_channel_history(
                saver, config=tup.config, channels=channels
            )
            assert ours == walked
        latest = saver.get_delta_channel_history(config=cfg, channels=["messages"])
        assert [m.content for m in latest["messages"]["seed"]] == [
            "one",
            "hi",
            "two",
            "hi",
            "three",
        ]


def test_an_edited_checkpoint_read_from_the_end_is_refused(tmp_path: Path) -> None:
    """A saver with nothing cached reads the latest checkpoint from the end
    of the timeline: an edited payload on its chain is refused there too;
    an older checkpoint read by id, whose chain the edit missed, reads."""
    db = tmp_path / "convo.db"
    cfg: Any = {"configurable": {"thread_id": "t"}}
    graph = StateGraph(MessagesState).add_node("echo", lambda s: {"messages": [AIMessage("hi")]})
    graph.add_edge(START, "echo").add_edge("echo", END)
    with convo.Store(db) as store:
        app = graph.compile(checkpointer=ConvoSaver(store))
        app.invoke({"messages": [HumanMessage("hello")]}, cfg)
        for i in range(3):
            app.invoke({"messages": [HumanMessage(f"again {i}")]}, cfg)
        first = [s.config for s in app.get_state_history(cfg)][-2]
    edit_checkpoints(db, b"again 2", b"AGAIN 2")
    with convo.Store(db) as store:
        saver = ConvoSaver(store)
        with pytest.raises(convo.ConvoError):
            saver.get_tuple(cfg)
        assert not saver._threads["t"].complete
        # What the edit did not touch still reads.
        tup = ConvoSaver(store).get_tuple(first)
        assert tup is not None
        assert [m.content for m in tup.checkpoint["channel_values"]["messages"]] == ["hello"]
