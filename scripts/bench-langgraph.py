#!/usr/bin/env python3
"""LangGraph checkpointers side by side on a thread whose messages
accumulate (`add_messages`): convo's `ConvoSaver` against LangGraph's
`SqliteSaver`, `InMemorySaver` and, with --pg ADMIN_URL, `PostgresSaver`
(and `ConvoSaver` on PostgreSQL: `convo-pg`), each in a fresh store (a
database of its own on PostgreSQL). A `+delta` saver (`memory+delta`,
`sqlite+delta`…) runs the graph with the messages in LangGraph's
`DeltaChannel` (beta: the checkpoint stores writes, a snapshot every
100), the messages given ids (its reducer does not assign them).

For each saver and each thread length (turns): bytes on disk (SQLite:
the store's whole folder, write-ahead log folded; PostgreSQL: its tables
with their indexes and TOAST), `put` and `get_tuple` latency as the graph
calls them (p50/p99), `get_state_history` over the whole thread, and
resuming at the last checkpoint (`get_state` through a new saver on the
same store: nothing cached; the median of five). Each turn adds a user message and an answer
of about 300 bytes each, all distinct (the thread's distinct text is
printed).

    CONVO_BIN=target/release/convo PYTHONPATH=python \\
        python scripts/bench-langgraph.py --turns 300 1200 --savers convo sqlite memory
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from typing_extensions import TypedDict

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


def delta_state() -> Any:
    """A state whose messages are a `DeltaChannel`."""
    from langgraph.channels import DeltaChannel
    from langgraph.graph.message import _messages_delta_reducer

    channel = DeltaChannel(_messages_delta_reducer)
    return TypedDict("DeltaMessages", {"messages": Annotated[list[AnyMessage], channel]})


def graph(saver: BaseCheckpointSaver[Any], delta: bool) -> Any:
    def answer(state: dict[str, Any]) -> dict[str, Any]:
        turn = len(state["messages"]) // 2
        said = text(turn, "assistant")
        return {"messages": [AIMessage(said, id=f"a{turn}") if delta else AIMessage(said)]}

    g = StateGraph(delta_state() if delta else MessagesState).add_node("answer", answer)
    return g.add_edge(START, "answer").add_edge("answer", END).compile(checkpointer=saver)


# The interpreter's full collections (generation 2) so far: they stop
# every thread for tens of milliseconds and land in whichever call is
# allocating, so each sample says whether one ran during it.
FULL_COLLECTIONS = [0]


def _count_full(phase: str, info: dict[str, int]) -> None:
    if phase == "stop" and info.get("generation") == 2:
        FULL_COLLECTIONS[0] += 1


gc.callbacks.append(_count_full)


def timed(samples: list[tuple[float, bool]], f: Callable[..., Any]) -> Callable[..., Any]:
    def run(*a: Any, **kw: Any) -> Any:
        full = FULL_COLLECTIONS[0]
        t = time.perf_counter()
        try:
            return f(*a, **kw)
        finally:
            ms = (time.perf_counter() - t) * 1000
            samples.append((ms, FULL_COLLECTIONS[0] != full))

    return run


def latency(name: str, samples: list[tuple[float, bool]]) -> dict[str, Any]:
    """p50 and p99 of a call, p99 again over the calls no full collection
    ran in, and how many had one."""
    calm = [ms for ms, full in samples if not full]
    every = [ms for ms, _ in samples]
    return {
        f"{name}_p50_ms": round(pct(every, 50), 3),
        f"{name}_p99_ms": round(pct(every, 99), 3),
        f"{name}_p99_no_full_gc_ms": round(pct(calm, 99), 3),
        f"{name}_with_full_gc": len(every) - len(calm),
    }


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
        # The store's server started (once per process) before the clock.
        saver.store.sessions()
        yield saver


@contextmanager
def sqlite_saver(folder: Path, url: str | None) -> Iterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(str(folder / "checkpoints.db")) as saver:
        yield saver


MEMORY: dict[Path, BaseCheckpointSaver[Any]] = {}
RESUMES = 5


@contextmanager
def memory_saver(folder: Path, url: str | None) -> Iterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.memory import InMemorySaver

    yield MEMORY.setdefault(folder, InMemorySaver())


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
    "convo-pg": convo_saver,
    "sqlite": sqlite_saver,
    "memory": memory_saver,
    "postgres": postgres_saver,
}
CHOICES = [*SAVERS, *(f"{k}+delta" for k in SAVERS)]


@contextmanager
def pg_database(admin: str | None) -> Iterator[str]:
    """A fresh database on the server of `admin`, dropped afterwards."""
    import psycopg

    assert admin, "--pg ADMIN_URL"
    name = f"bench_lg_{os.getpid()}_{time.monotonic_ns()}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    try:
        yield admin.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def pg_bytes(url: str) -> int:
    """Bytes of the database's own tables, indexes and TOAST included."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CHECKPOINT")
        row = c.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND c.relkind = 'r'"
        ).fetchone()
    return int(row[0]) if row else 0


def run(
    name: str, turns: int, pg: str | None, history: bool = True, workers: int = 1
) -> dict[str, Any]:
    base, delta = name.removesuffix("+delta"), name.endswith("+delta")
    on_pg = base in ("postgres", "convo-pg")
    with tempfile.TemporaryDirectory(prefix=f"bench-lg-{base}-") as tmp:
        folder = Path(tmp)
        with pg_database(pg) if on_pg else nullcontext(None) as url:
            out = run_in(base, delta, turns, folder, url, history, workers)
            if on_pg:
                assert url is not None
                out["bytes_on_disk"] = pg_bytes(url)
            elif base != "memory":
                out["bytes_with_log_left"] = folder_bytes(folder)
                fold_logs(folder)
                out["bytes_on_disk"] = folder_bytes(folder)
        MEMORY.pop(folder, None)
    size = out.get("bytes_on_disk")
    out["bytes_per_turn"] = None if size is None else round(size / turns)
    return {"saver": name, "turns": turns, "workers": workers, **out}


def run_in(
    base: str,
    delta: bool,
    turns: int,
    folder: Path,
    url: str | None,
    history: bool,
    workers: int = 1,
) -> dict[str, Any]:
    cfg: Any = {"configurable": {"thread_id": f"bench-{turns}"}}
    with ExitStack() as stack:
        # Several workers (processes' savers) on one store take turns.
        savers = [stack.enter_context(SAVERS[base](folder, url)) for _ in range(workers)]
        puts: list[tuple[float, bool]] = []
        gets: list[tuple[float, bool]] = []
        for saver in savers:
            saver.put = timed(puts, saver.put)  # type: ignore[method-assign]
            saver.get_tuple = timed(gets, saver.get_tuple)  # type: ignore[method-assign]
        apps = [graph(saver, delta) for saver in savers]
        app = apps[0]
        distinct = 0
        started = time.perf_counter()
        for turn in range(turns):
            said = text(turn, "user")
            distinct += len(said.encode()) + len(text(turn, "assistant").encode())
            msg = HumanMessage(said, id=f"u{turn}") if delta else HumanMessage(said)
            apps[turn % workers].invoke({"messages": [msg]}, cfg)
        total_s = time.perf_counter() - started
        t = time.perf_counter()
        listed = sum(1 for _ in app.get_state_history(cfg)) if history else None
        history_ms = (time.perf_counter() - t) * 1000 if history else None
    # Resuming: a new saver on the same store reads the last checkpoint
    # (five times, each saver new: the median).
    resumes: list[float] = []
    for _ in range(RESUMES):
        with SAVERS[base](folder, url) as saver:
            t = time.perf_counter()
            last = graph(saver, delta).get_state(cfg)
            resumes.append((time.perf_counter() - t) * 1000)
            assert len(last.values["messages"]) == 2 * turns
    resume_ms = pct(resumes, 50)
    return {
        "checkpoints": listed,
        "distinct_text_bytes": distinct,
        **latency("put", puts),
        **latency("get_tuple", gets),
        "get_state_history_ms": None if history_ms is None else round(history_ms, 1),
        "resume_ms": round(resume_ms, 2),
        "run_s": round(total_s, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, nargs="+", default=[300])
    ap.add_argument("--savers", nargs="+", default=["convo", "sqlite", "memory"], choices=CHOICES)
    ap.add_argument("--pg", help="a PostgreSQL admin URL (postgres, convo-pg: a database each)")
    ap.add_argument(
        "--history-up-to",
        type=int,
        default=1_000_000,
        metavar="TURNS",
        help="skip get_state_history on longer threads (it reads every checkpoint whole)",
    )
    ap.add_argument(
        "--max-turns",
        action="append",
        default=[],
        metavar="SAVER=TURNS",
        help="skip a saver on longer threads (sqlite=1200: its store grows with the square)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="savers on the one store taking turns on the thread (as workers of a server do)",
    )
    ap.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() once the modules are imported (full collections skip those objects)",
    )
    args = ap.parse_args()
    caps = {k: int(v) for k, v in (m.split("=", 1) for m in args.max_turns)}
    os.environ.setdefault("PYTHONHASHSEED", "0")
    if args.gc_freeze:
        import langgraph.checkpoint.sqlite  # noqa: F401  (what the savers import)

        import convo.langgraph  # noqa: F401

        gc.collect()
        gc.freeze()
    for turns in args.turns:
        for name in args.savers:
            if turns > caps.get(name, turns):
                print(json.dumps({"saver": name, "turns": turns, "skipped": "--max-turns"}))
                continue
            if args.workers > 1 and name.startswith("memory"):
                print(json.dumps({"saver": name, "turns": turns, "skipped": "in memory"}))
                continue
            out = run(name, turns, args.pg, turns <= args.history_up_to, args.workers)
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
