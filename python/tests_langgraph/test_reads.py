"""What a read hands the graph: new objects each time, equal to what was
put and to what a saver with nothing cached decodes (a read copies the
elements it decoded before, `_fresh`); and the newest checkpoint even
when another process put it since this saver last read."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph

import convo
from convo.langgraph import ConvoSaver, _fresh


def said(saver: ConvoSaver) -> Any:
    """A graph that answers with a tool call whose fields nest."""

    def answer(state: dict[str, Any]) -> dict[str, Any]:
        n = len(state["messages"])
        call = {"name": "look", "args": {"q": f"q{n}", "k": [1, 2]}, "id": f"t{n}"}
        return {
            "messages": [
                AIMessage(
                    f"answer {n}",
                    tool_calls=[call],
                    additional_kwargs={"nested": {"k": [1, {"x": "y"}]}},
                    response_metadata={"model": "m", "tokens": [3, 4]},
                )
            ]
        }

    g = StateGraph(MessagesState).add_node("answer", answer)
    return g.add_edge(START, "answer").add_edge("answer", END).compile(checkpointer=saver)


def dumps(messages: list[Any]) -> list[dict[str, Any]]:
    return [{**m.model_dump(), "set": sorted(m.model_fields_set)} for m in messages]


def messages(saver: ConvoSaver, cfg: Any) -> list[Any]:
    tup = saver.get_tuple(cfg)
    assert tup is not None
    return list(tup.checkpoint["channel_values"]["messages"])


def test_each_read_hands_out_new_objects(store_url: str) -> None:
    cfg: Any = {"configurable": {"thread_id": "fresh"}}
    with convo.Store(store_url) as store:
        saver = ConvoSaver(store)
        app = said(saver)
        for i in range(3):
            app.invoke({"messages": [HumanMessage(f"m{i}")]}, cfg)
        first = messages(saver, cfg)
        expected = dumps(first)
        # What decoding gives: the same values and the same fields set.
        assert dumps(messages(ConvoSaver(store), cfg)) == expected
        ai = first[1]
        assert isinstance(ai, AIMessage)
        # The graph (or its user) changes what it was handed, deep down.
        ai.content = "changed"
        ai.tool_calls[0]["args"]["k"].append(3)
        ai.additional_kwargs["nested"]["k"][1]["x"] = "z"
        ai.response_metadata["tokens"].append(5)
        ai.name = "someone"
        first[0].content = "changed too"
        first.append(HumanMessage("appended"))
        second = messages(saver, cfg)
        assert dumps(second) == expected
        assert all(a is not b for a, b in zip(first[:-1], second, strict=True))
        assert second[1].tool_calls[0]["args"] is not first[1].tool_calls[0]["args"]
        # A read after the graph went on holds the new turn, as decoded.
        app.invoke({"messages": [HumanMessage("m3")]}, cfg)
        after = dumps(messages(saver, cfg))
        assert after[: len(expected)] == expected
        assert after == dumps(messages(ConvoSaver(store), cfg))


def test_an_element_that_cannot_be_copied_is_decoded_again(store_url: str) -> None:
    """A message holding an object that is not JSON-like (a tool's
    artifact) is not copied: that element is decoded again, still new;
    the others are copies, as a new saver decodes them."""
    when = datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc)
    tool = ToolMessage("found", tool_call_id="t1", artifact={"at": when, "rows": [1]})
    with pytest.raises(_fresh.Opaque):
        _fresh.fresh(tool)
    cfg: Any = {"configurable": {"thread_id": "opaque"}}
    with convo.Store(store_url) as store:
        saver = ConvoSaver(store)
        app = said(saver)
        app.invoke({"messages": [HumanMessage("m0"), tool]}, cfg)
        first = messages(saver, cfg)
        first[1].artifact["rows"].append(2)
        second = messages(saver, cfg)
        assert dumps(second) == dumps(messages(ConvoSaver(store), cfg))
        assert [type(m).__name__ for m in second] == [
            "HumanMessage",
            "ToolMessage",
            "AIMessage",
        ]
    assert second[1].artifact == {"at": when, "rows": [1]}
    assert second[1] is not first[1]


def test_a_read_sees_a_checkpoint_another_process_put(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two savers on two `Store`s (two `convo serve` processes) take turns
    on one thread: each read is the other's last checkpoint, read on from
    where the saver stopped (its timeline's end is read once)."""
    ends: list[tuple[int, str]] = []
    read_end = ConvoSaver._read_end

    def counted(self: ConvoSaver, th: Any, t: Any) -> None:
        ends.append((id(self), t.name))
        read_end(self, th, t)

    monkeypatch.setattr(ConvoSaver, "_read_end", counted)
    cfg: Any = {"configurable": {"thread_id": "two"}}
    with convo.Store(store_url) as one, convo.Store(store_url) as other:
        a, b = ConvoSaver(one), ConvoSaver(other)
        apps = [said(a), said(b)]
        for i in range(4):
            apps[i % 2].invoke({"messages": [HumanMessage(f"m{i}")]}, cfg)
            for saver in (a, b):
                tup = saver.get_tuple(cfg)
                assert tup is not None
                got = [m.content for m in tup.checkpoint["channel_values"]["messages"]]
                assert got[-2:] == [f"m{i}", f"answer {2 * i + 1}"], (i, got)
                assert len(got) == 2 * (i + 1)
                assert dumps(tup.checkpoint["channel_values"]["messages"]) == dumps(
                    messages(ConvoSaver(one), cfg)
                )
    assert [name for saver, name in ends if saver == id(b)] == ["main"]
