"""Checkpoints given by their parent's (`p`, `a`) and the snapshots between
them read back the same through a saver that has nothing cached."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

import convo
from convo.langgraph import ConvoSaver, _values


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
