#!/usr/bin/env python3
"""LangGraph checkpointers side by side on a thread whose messages
accumulate (`add_messages`): convo's `ConvoSaver` against LangGraph's
`SqliteSaver` and `InMemorySaver` (and `PostgresSaver` with --pg URL).

For each saver and each thread length (turns): bytes on disk (the store's
whole folder, -wal included), `put` and `get_tuple` latency as the graph
calls them (p50/p99), and `get_state_history` over the whole thread.
Each turn adds a user message and an answer of about 300 bytes each, all
distinct (the thread's distinct text is printed).

    CONVO_BIN=target/release/convo PYTHONPATH=python \\
        python scripts/bench-langgraph.py --turns 300 1200 --savers convo sqlite memory
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph

WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
]


def text(turn: int, who: str) -> str:
    """About 300 bytes, distinct for every turn and speaker."""
    words = [WORDS[(turn * 7 + i * 3 + len(who)) % len(WORDS)] for i in range(45)]
    return f"{who} {turn}: " + " ".join(words)


def graph(saver: BaseCheckpointSaver[Any]) -> Any:
    def answer(state: MessagesState) -> dict[str, Any]:
        turn = len(state["messages"]) // 2
        return {"messages": [AIMessage(text(turn, "assistant"))]}

    g = StateGraph(MessagesState).add_node("answer", answer)
    return g.add_edge(START, "answer").add_edge("answer", END).compile(checkpointer=saver)


def timed(samples: list[float], f: Callable[..., Any]) -> Callable[..., Any]:
    def run(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return f(*a, **kw)
        finally:
            samples.append((time.perf_counter() - t) * 1000)

    return run


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def fold_logs(path: Path) -> None:
    """Folds each closed SQLite database's write-ahead log into it (what
    the next writer would do), so the figure is what stays on disk."""
    for db in path.glob("*.db"):
        with sqlite3.connect(db) as c:
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")


@contextmanager
def convo_saver(folder: Path, url: str | None) -> Iterator[BaseCheckpointSaver[Any]]:
    from convo.langgraph import ConvoSaver

    with ConvoSaver.from_conn_string(url or f"sqlite://{folder / 'convo.db'}") as saver:
        yield saver


@contextmanager
def sqlite_saver(folder: Path, url: str | None) -> Iterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(str(folder / "checkpoints.db")) as saver:
        yield saver


@contextmanager
def memory_saver(folder: Path, url: str | None) -> Iterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.memory import InMemorySaver

    yield InMemorySaver()


@contextmanager
def postgres_saver(folder: Path, url: str | None) -> Iterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.postgres import PostgresSaver

    assert url, "--pg URL"
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        yield saver


SAVERS: dict[
    str, Callable[[Path, str | None], AbstractContextManager[BaseCheckpointSaver[Any]]]
] = {
    "convo": convo_saver,
    "sqlite": sqlite_saver,
    "memory": memory_saver,
    "postgres": postgres_saver,
}


def run(name: str, turns: int, pg: str | None, history: bool = True) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-lg-{name}-") as tmp:
        folder = Path(tmp)
        url = pg if name in ("postgres",) else None
        with SAVERS[name](folder, url) as saver:
            puts: list[float] = []
            gets: list[float] = []
            saver.put = timed(puts, saver.put)  # type: ignore[method-assign]
            saver.get_tuple = timed(gets, saver.get_tuple)  # type: ignore[method-assign]
            app = graph(saver)
            cfg: Any = {"configurable": {"thread_id": f"bench-{turns}"}}
            distinct = 0
            started = time.perf_counter()
            for turn in range(turns):
                said = text(turn, "user")
                distinct += len(said.encode()) + len(text(turn, "assistant").encode())
                app.invoke({"messages": [HumanMessage(said)]}, cfg)
            total_s = time.perf_counter() - started
            t = time.perf_counter()
            listed = sum(1 for _ in app.get_state_history(cfg)) if history else None
            history_ms = (time.perf_counter() - t) * 1000 if history else None
            t = time.perf_counter()
            last = app.get_state(cfg)
            resume_ms = (time.perf_counter() - t) * 1000
            assert len(last.values["messages"]) == 2 * turns
        on_disk = name in ("convo", "sqlite")
        with_log = folder_bytes(folder) if on_disk else None
        if on_disk:
            fold_logs(folder)
        size = folder_bytes(folder) if on_disk else None
        return {
            "saver": name,
            "turns": turns,
            "checkpoints": listed,
            "distinct_text_bytes": distinct,
            "bytes_on_disk": size,
            "bytes_with_log_left": with_log,
            "bytes_per_turn": None if size is None else round(size / turns),
            "put_p50_ms": round(pct(puts, 50), 3),
            "put_p99_ms": round(pct(puts, 99), 3),
            "get_tuple_p50_ms": round(pct(gets, 50), 3),
            "get_tuple_p99_ms": round(pct(gets, 99), 3),
            "get_state_history_ms": None if history_ms is None else round(history_ms, 1),
            "get_state_ms": round(resume_ms, 2),
            "run_s": round(total_s, 1),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, nargs="+", default=[300])
    ap.add_argument("--savers", nargs="+", default=["convo", "sqlite", "memory"], choices=SAVERS)
    ap.add_argument("--pg", help="a PostgreSQL URL for the postgres saver")
    ap.add_argument(
        "--no-history", action="store_true", help="skip get_state_history (long threads)"
    )
    args = ap.parse_args()
    os.environ.setdefault("PYTHONHASHSEED", "0")
    for turns in args.turns:
        for name in args.savers:
            print(json.dumps(run(name, turns, args.pg, not args.no_history)), flush=True)


if __name__ == "__main__":
    main()
