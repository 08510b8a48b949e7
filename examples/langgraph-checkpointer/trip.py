"""A LangGraph graph on convo's checkpointer, runnable offline.

    pip install convo langgraph          # or: PYTHONPATH=python CONVO_BIN=…/convo
    python examples/langgraph-checkpointer/trip.py /tmp/trip.db

Three turns on thread `trip`, then time travel: the first question is
edited at its checkpoint and the graph runs again from there. convo keeps
both timelines: the original on `main`, the edited one on `fork-1`.
Then look at it with convo itself:

    convo --store /tmp/trip.db session get trip
    convo --store /tmp/trip.db branch list trip
    convo --store /tmp/trip.db log trip --graph
    convo --store /tmp/trip.db verify
"""

from __future__ import annotations

import sys
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from convo.langgraph import ConvoSaver


def guide(state: MessagesState) -> dict[str, Any]:
    """A travel guide that answers the last question (no model needed)."""
    asked = str(state["messages"][-1].content)
    return {"messages": [AIMessage(f"For '{asked}': {len(state['messages'])} messages so far.")]}


def main(db: str) -> None:
    builder = StateGraph(MessagesState).add_node("guide", guide)
    builder.add_edge(START, "guide").add_edge("guide", END)
    with ConvoSaver.from_conn_string(f"sqlite://{db}") as saver:  # the one line that changes
        graph = builder.compile(checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": "trip"}}
        for q in ["Where to in May?", "Lisbon or Porto?", "Three days enough?"]:
            print(graph.invoke({"messages": [HumanMessage(q)]}, cfg)["messages"][-1].content)

        # Time travel: the first question, before it was answered.
        first = next(
            s
            for s in graph.get_state_history(cfg)
            if s.next == ("guide",) and len(s.values["messages"]) == 1
        )
        msg = first.values["messages"][0]
        edited = graph.update_state(
            first.config, {"messages": [HumanMessage("Where to in June?", id=msg.id)]}
        )
        print(graph.invoke(None, edited)["messages"][-1].content)
        print("timelines:", ", ".join(b.name for b in saver.store.branches("trip")))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "trip.db")
