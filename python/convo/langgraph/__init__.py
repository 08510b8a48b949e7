"""LangGraph checkpointers over a convo store: `ConvoSaver`, `AsyncConvoSaver`.

    from convo.langgraph import ConvoSaver

    with ConvoSaver.from_conn_string("sqlite:///path/convo.db") as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke(inputs, {"configurable": {"thread_id": "trip"}})

A thread is a session titled by its `thread_id` (`convo session get trip`),
a checkpoint a node of its timelines, a subgraph's namespace a timeline
of its own, and a checkpoint made from an old one (`update_state` or
`invoke` at an old `checkpoint_id`) a fork: a named timeline that `convo
branch list` and `convo log --graph` show. Checkpoints are payloads of
the store, so `convo verify` checks them and an edited one is refused
when read; see `convo.langgraph._index` for the layout.

`delete_thread` erases the thread's content from the store (`convo
redact --session`: every payload only it holds, its nodes' diagnostics,
its title; the database's files rewritten), keeping its nodes' hashes so
the store still verifies; `prune` and `delete_for_runs` rewrite the
thread into a new session with what is kept and erase the old one (what
the new one shares with it stays).
"""

from __future__ import annotations

import asyncio
import builtins
import json
import random
import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from operator import itemgetter
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from convo.errors import NotFoundError
from convo.langgraph import _index as ix
from convo.langgraph._fresh import fresh_list
from convo.langgraph._values import Seq, Stored, Value, Values, payload_channel, refs
from convo.models import Line, decode_payload
from convo.store import PathLike, Pending, Store, _q

__all__ = ["AsyncConvoSaver", "ConvoSaver"]

_MSGPACK = "msgpack"

END_READ = 32
"""How many nodes the first read of a timeline's end takes, with their
payloads: the newest checkpoint and its writes. Its `base` names where
its chain of payloads starts (`_values.SNAPSHOT_EVERY` checkpoints back
at most): the next read takes the timeline from there, in one request.
A checkpoint without one (written by an earlier version) is read back
in reads of `BACK_READ` nodes, or as many again as were read."""
BACK_READ = 224
"""The least nodes a read further back takes, when it is not told where
to stop (what an earlier version read first: 256 with the end's)."""
PAGE = 2000
"""The most nodes one read of a timeline takes (the API's limit)."""

# Titles of threads detached by earlier versions (nothing erased).
DELETED = "[deleted] "
PRUNED = "[pruned] "
REDACTED = "[redacted]"
"""The title of an erased session (convo's)."""


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


class ConvoSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that keeps threads in a convo store.

    `store` is an open `convo.Store` (the saver does not close it); or use
    `ConvoSaver.from_conn_string(url_or_path)`, which opens one and closes
    it at the end of the `with` block. Safe to share between threads.
    """

    def __init__(self, store: Store, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self.store = store
        self._lock = threading.RLock()
        self._threads: dict[str, ix.Thread] = {}
        # Checkpoints' values as serialized (put, or read back): a child
        # gives what it shares with its parent by reference.
        self._values = Values()
        self._writes: OrderedDict[str, list[tuple[str, bytes]]] = OrderedDict()
        # Payloads read along with their timeline, not yet used.
        self._raw: OrderedDict[str, tuple[str, str | None]] = OrderedDict()
        # Writes that came before their checkpoint (LangGraph puts both from
        # a thread pool): written right after it.
        self._early: dict[tuple[str, str, str], list[tuple[Any, ...]]] = {}
        # Checkpoints whose put has begun: their writes wait for them
        # without asking the store whether another process put them.
        self._coming: set[tuple[str, str, str]] = set()

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: PathLike | None = None) -> Iterator[ConvoSaver]:
        """A saver over the store at a convo store URL (`sqlite:///…`,
        `postgres://…`) or SQLite path (`None`: the CLI's default store)."""
        store = Store(conn_string)
        try:
            yield cls(store)
        finally:
            store.close()

    # ----- the store ----------------------------------------------------------

    def _api(self, method: str, path: str, payload: Any = None, **kw: Any) -> Any:
        return self.store._http().json(method, path, payload, **kw)

    def _timeline(
        self, session: str, branch: str, cursor: int, limit: int, *, payloads: bool = True
    ) -> dict[str, Any]:
        """A page of a timeline: `limit` nodes from position `cursor`
        (negative: from the end), with their payloads unless told not."""
        return cast(
            dict[str, Any],
            self._api(
                "GET",
                f"/sessions/{_q(session)}/branches/{_q(branch)}/timeline",
                query={"cursor": cursor, "limit": limit, "payloads": str(payloads).lower()},
            ),
        )

    def _payload(self, node: str) -> bytes:
        return self.store._http().request("GET", f"/api/v1/nodes/{_q(node)}/payload")

    def _append(self, th: ix.Thread, branch: str, line: Line) -> dict[str, Any]:
        d = self._api(
            "POST",
            f"/sessions/{_q(th.session)}/branches/{_q(branch)}/nodes",
            [line.to_json()],
        )
        node: dict[str, Any] = d["nodes"][0]
        t = th.timeline(branch)
        t.length = int(node["depth"]) - 1
        th.take(t, [node])
        return node

    def _fork(self, th: ix.Thread, at: str, name: str, ns: str, last: str | None) -> None:
        d = self._api("POST", f"/sessions/{_q(th.session)}/fork", {"from": at, "branch": name})
        node = d["node"]
        th.timelines[name] = ix.Timeline(name, node["hash"], int(node["depth"]), ns, last)

    def _find(self, thread_id: str, *, fresh: bool = True) -> ix.Thread | None:
        """The thread's session as the store has it now (`fresh`) or as this
        saver last wrote it, `None` if none."""
        th = self._threads.get(thread_id)
        if th is not None and not fresh:
            return th
        if th is None:
            opened = self._open(thread_id, complete=True)
            if opened is None:
                return None
            th = opened[0]
        self._refresh(th)
        return th

    def _open(
        self, thread_id: str, *, complete: bool
    ) -> tuple[ix.Thread, builtins.list[dict[str, Any]]] | None:
        """The thread's session, not read yet, with its branches as that
        read gave them (`None` if the store has no session of that thread):
        read whole from now on (`complete`), or from its ends."""
        try:
            d = self._api("GET", f"/sessions/{_q(thread_id)}")
        except NotFoundError:
            return None
        s = d["session"]
        if s.get("title") != thread_id or s.get("agent") != ix.AGENT:
            return None
        th = self._threads[thread_id] = ix.Thread(thread_id, s["id"], complete=complete)
        return th, d["branches"]

    def _branches(self, th: ix.Thread) -> Pending:
        """Asks for the session's branches (`Pending.json` reads them)."""
        return self.store._http().send("GET", f"/api/v1/sessions/{_q(th.session)}/branches")

    def _refresh(
        self,
        th: ix.Thread,
        branches: builtins.list[dict[str, Any]] | None = None,
        *,
        payloads: bool = False,
    ) -> None:
        """Reads what was appended to the thread's timelines since last
        time (a thread read from its ends: all of them, from the start;
        `branches`: the session's, when just read). `payloads`: the first
        `BACK_READ` new nodes of a timeline come with theirs (a read of the
        newest checkpoint wants those another writer added)."""
        if not th.complete:
            th.reset(complete=True)
        if branches is None:
            branches = self._branches(th).json()
        for b in branches:
            t = th.timeline(b["name"])
            with_payloads = payloads and t.length > 0
            while b.get("head") and t.head != b["head"]:
                page = self._timeline(
                    th.session,
                    t.name,
                    t.length,
                    BACK_READ if with_payloads else PAGE,
                    payloads=with_payloads,
                )
                if not page["nodes"]:
                    break
                th.take(t, page["nodes"])
                if with_payloads:
                    self._keep_payloads(page["nodes"])
                    with_payloads = False

    def _find_newest(
        self, thread_id: str, ns: str, branches: builtins.list[dict[str, Any]] | None = None
    ) -> ix.Thread | None:
        """The thread for a read of the newest checkpoint of `ns`: one this
        saver read whole, refreshed; else its namespace's timelines read
        from their ends (the head back to the last checkpoint; `_stored`
        reads further back as the chain of payloads needs), as the store
        has them now (`branches`: the session's, when just read)."""
        th = self._threads.get(thread_id)
        if th is not None and th.complete:
            self._refresh(th, branches, payloads=True)
            return th
        if th is None:
            opened = self._open(thread_id, complete=False)
            if opened is None:
                return None
            th, branches = opened
        self._read_ends(th, ns, branches)
        return th

    def _catch_up(self, th: ix.Thread, ns: str) -> None:
        """Reads what was appended to the thread since last read."""
        if th.complete:
            self._refresh(th)
        else:
            self._read_ends(th, ns)

    def _read_ends(
        self, th: ix.Thread, ns: str, branches: builtins.list[dict[str, Any]] | None = None
    ) -> None:
        """Reads the ends of the namespace's timelines of a thread read
        from its ends, again from scratch if the store has more since
        (`branches`: the session's, when just read)."""
        if branches is None:
            branches = self._branches(th).json()
        heads = {b["name"]: b.get("head") for b in branches}
        moved = [
            t for t in th.timelines.values() if t.lo is not None and heads.get(t.name) != t.head
        ]
        if moved and not all(self._read_on(th, t, heads.get(t.name)) for t in moved):
            th.reset(complete=False)  # not just appended to: read the ends again
        base = ix.branch_base(ns)
        for name, head in heads.items():
            t = th.timeline(name)
            if t.lo is None and head and ix.base_of(name) == base:
                self._read_end(th, t)

    def _read_on(self, th: ix.Thread, t: ix.Timeline, head: str | None) -> bool:
        """Reads what another writer appended to a timeline read from its
        end, with the payloads (the checkpoints before are in the cache):
        `False` if it was not appended to, or more than `BACK_READ` nodes
        were (then the end is read again)."""
        if head is None or t.head is None:
            return False
        page = self._timeline(th.session, t.name, t.length, BACK_READ)
        nodes = page["nodes"]
        if not nodes or nodes[0].get("parent") != t.head or nodes[-1]["hash"] != head:
            return False
        th.take(t, nodes)
        self._keep_payloads(nodes)
        return True

    def _read_end(self, th: ix.Thread, t: ix.Timeline) -> None:
        """Reads a timeline's last nodes, further back to its last
        checkpoint of its namespace, and from where that one's chain of
        payloads starts when it says so."""
        page = self._timeline(th.session, t.name, -END_READ, END_READ)
        th.take_end(t, page["nodes"], int(page["total"]))
        self._keep_payloads(page["nodes"])
        while t.last is None and self._read_before(th, t):
            pass
        last = None if t.last is None or t.ns is None else th.checkpoints.get((t.ns, t.last))
        # Where its chain of payloads starts, when it says (`delta`).
        if last is not None and last.delta and 0 < last.base <= (t.lo or 0):
            self._read_before(th, t, to=last.base - 1)

    def _read_before(self, th: ix.Thread, t: ix.Timeline, *, to: int | None = None) -> bool:
        """Reads the nodes before the first read of a timeline read from
        its end, with their payloads: from position `to` (depth `to + 1`),
        else `BACK_READ` or as many again as were read; `False` when it was read from its
        first node."""
        if not t.lo:
            return False
        start = max(0, t.lo - max(t.length - t.lo, BACK_READ)) if to is None else max(0, to)
        while t.lo > start:
            n = min(t.lo - start, PAGE)
            page = self._timeline(th.session, t.name, t.lo - n, n)
            if len(page["nodes"]) != n:
                raise RuntimeError(
                    f"timeline {t.name!r} of thread {th.thread_id!r} changed while read"
                )
            th.take_before(t, page["nodes"])
            self._keep_payloads(page["nodes"])
        return True

    def _keep_payloads(self, nodes: builtins.list[dict[str, Any]]) -> None:
        """Keeps the payloads a read of a chain brought besides its own, as
        they are, until a read asks for them (`_payloads`, `_write_values`)."""
        for n in nodes:
            if n.get("payload") is not None and n["hash"] not in self._writes:
                self._raw[n["hash"]] = (n["payload"], n.get("payload_encoding"))
        while len(self._raw) > 65536:
            self._raw.popitem(last=False)

    def _kept(self, node: str) -> bytes | None:
        kept = self._raw.pop(node, None)
        return None if kept is None else decode_payload(*kept)

    def _thread(self, thread_id: str) -> ix.Thread:
        """The thread's session, created (with its first node) if missing."""
        th = self._find(thread_id, fresh=False)
        if th is not None:
            return th
        return self._create(thread_id, thread_id)

    def _create(self, thread_id: str, title: str) -> ix.Thread:
        s = self._api("POST", "/sessions", {"agent": ix.AGENT, "title": title})
        th = ix.Thread(thread_id, s["id"])
        first = Line(
            "invoke",
            json.dumps({"langgraph_thread": thread_id}),
            ix.CHECKPOINT_FROM,
            ix.CHECKPOINT_TO,
            {ix.DIAG: {"thread": thread_id}},
        )
        self._append(th, "main", first)
        if title == thread_id:
            self._threads[thread_id] = th
        return th

    def session_of(self, thread_id: str) -> str:
        """The id of the thread's session (`ses-…`), created if the thread
        has none yet: record the graph's model calls into it with
        `convo.record(thread_id, branch="llm")` (the proxy finds it by title)."""
        with self._lock:
            return self._thread(thread_id).session

    # ----- reads ----------------------------------------------------------------

    def _tuple(self, th: ix.Thread, cp: ix.Checkpoint, *, handed: bool = True) -> CheckpointTuple:
        st = self._stored(th, cp)
        checkpoint: Checkpoint = self.serde.loads_typed(st.skeleton)
        values = {k: self._load(v) for k, v in st.channels.items()}
        if handed:
            # The graph may go on from these objects: its next put appends.
            self._values.handed(
                (th.thread_id, cp.ns, cp.id),
                {k: refs(v) for k, v in values.items() if isinstance(v, list)},
            )
        checkpoint["channel_values"] = values
        conf = {"thread_id": th.thread_id, "checkpoint_ns": cp.ns}
        parent = None
        if cp.parent is not None:
            parent = {"configurable": {**conf, "checkpoint_id": cp.parent}}
        return CheckpointTuple(
            config={"configurable": {**conf, "checkpoint_id": cp.id}},
            checkpoint=checkpoint,
            metadata=cast(CheckpointMetadata, dict(cp.metadata)),
            parent_config=parent,  # type: ignore[arg-type]
            pending_writes=self._pending(cp),
        )

    def _load(self, v: Value) -> Any:
        """A channel's value, new objects: a list's elements decoded once
        and copied (`_fresh`), decoded again where they cannot be."""
        if not isinstance(v, Seq):
            return self.serde.loads_typed(v)
        done = self._values.decoded(v.items)
        if len(done) < v.n:
            done.extend(self._decode_list(v.items[len(done) : v.n]))
        return fresh_list(done, v.n, lambda i: self.serde.loads_typed(v.items[i]))

    def _decode_list(self, v: builtins.list[ix.Typed]) -> builtins.list[Any]:
        # `map` over C functions: a long thread's list has thousands.
        if v and all(map(_MSGPACK.__eq__, map(itemgetter(0), v))):
            # msgpack's array is its length and its elements: one call.
            raw = b"\xdd" + len(v).to_bytes(4, "big") + b"".join(map(itemgetter(1), v))
            return cast(builtins.list[Any], self.serde.loads_typed(("msgpack", raw)))
        return [self.serde.loads_typed(e) for e in v]

    def _stored(self, th: ix.Thread, cp: ix.Checkpoint) -> Stored:
        """A checkpoint's values, rebuilt from its chain of payloads back
        to a snapshot or to a checkpoint in the cache."""
        chain: list[ix.Checkpoint] = []
        base: Stored | None = None
        at: ix.Checkpoint | None = cp
        while at is not None:
            base = self._values.get((th.thread_id, at.ns, at.id))
            if base is not None:
                break
            chain.append(at)
            if not at.delta:
                break
            key = (at.ns, at.parent or "")
            while at.parent is not None and key not in th.checkpoints and not th.complete:
                # A thread read from its ends: the parent is further back
                # on the timeline its child was read on.
                if not self._read_before(th, th.timelines[at.branch]):
                    break
            at = th.checkpoints.get(key)
            if at is None:
                raise ValueError(
                    f"checkpoint {chain[-1].id!r} of thread {th.thread_id!r}: "
                    "its parent, which holds some of its values, is not in the store"
                )
        raws = self._payloads(th.session, chain)
        for c in reversed(chain):
            skeleton, ops = ix.read_checkpoint_payload(raws[c.node])
            base = Values.apply(base if c.delta else None, skeleton, ops)
            self._values.keep((th.thread_id, c.ns, c.id), base)
        if base is None:
            raise ValueError(f"checkpoint {cp.id!r}: no values")
        return base

    def _payloads(self, session: str, cps: builtins.list[ix.Checkpoint]) -> dict[str, bytes]:
        """The payloads of a chain of checkpoints (newest first): one read
        of the timeline's stretch that holds them when there are several."""
        out: dict[str, bytes] = {}
        for c in cps:
            raw = self._kept(c.node)
            if raw is not None:
                out[c.node] = raw
        cps = [c for c in cps if c.node not in out]
        if len(cps) <= 1 or any(c.depth <= 0 for c in cps):
            return {**out, **{c.node: self._payload(c.node) for c in cps}}
        lo, hi = min(c.depth for c in cps), max(c.depth for c in cps)
        want = {c.node for c in cps}
        cursor = lo - 1
        while cursor < hi:
            page = self._timeline(session, cps[0].branch, cursor, min(hi - cursor, PAGE))
            if not page["nodes"]:
                break
            for n in page["nodes"]:
                raw = decode_payload(n.get("payload"), n.get("payload_encoding"))
                if n["hash"] in want and raw is not None:
                    out[n["hash"]] = raw
            self._keep_payloads([n for n in page["nodes"] if n["hash"] not in want])
            cursor += len(page["nodes"])
        for c in cps:
            if c.node not in out:
                out[c.node] = self._payload(c.node)
        return out

    def _dump(self, v: Any) -> ix.Channel:
        if isinstance(v, list):
            return [self.serde.dumps_typed(e) for e in v]
        return self.serde.dumps_typed(v)

    def _write_values(self, node: str) -> list[tuple[str, bytes]]:
        values = self._writes.get(node)
        if values is None:
            raw = self._kept(node)
            values = ix.read_writes_payload(self._payload(node) if raw is None else raw)
            self._cache_writes(node, values)
        return values

    def _cache_writes(self, node: str, values: builtins.list[tuple[str, bytes]]) -> None:
        self._writes[node] = values
        while len(self._writes) > 4096:
            self._writes.popitem(last=False)

    def _pending(self, cp: ix.Checkpoint) -> list[PendingWrite]:
        ws = sorted(cp.writes.values(), key=lambda w: (w.task_path, w.task_id, w.idx))
        return [
            (w.task_id, w.channel, self.serde.loads_typed(self._write_values(w.node)[w.pos]))
            for w in ws
        ]

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        ns = conf.get("checkpoint_ns", "")
        cp_id = get_checkpoint_id(config)
        with self._lock:
            thread_id = str(conf["thread_id"])
            known = self._threads.get(thread_id)
            if known is not None:
                return self._ahead(known, ns, cp_id)
            # By id: read the thread whole; else from its ends.
            th = self._find(thread_id) if cp_id else self._find_newest(thread_id, ns)
            return None if th is None else self._checkpoint(th, ns, cp_id)

    def _checkpoint(self, th: ix.Thread, ns: str, cp_id: str | None) -> CheckpointTuple | None:
        """The checkpoint `cp_id` of `ns` (`None`: the newest) as read."""
        cp = th.checkpoints.get((ns, cp_id)) if cp_id else th.newest(ns)
        if cp is None and not th.complete:
            self._refresh(th)  # not at the ends read: read the thread whole
            cp = th.checkpoints.get((ns, cp_id)) if cp_id else th.newest(ns)
        return None if cp is None else self._tuple(th, cp)

    def _ahead(self, th: ix.Thread, ns: str, cp_id: str | None) -> CheckpointTuple | None:
        """`get_tuple` on a thread read before. The tuple of a checkpoint
        whose values the saver holds is made while the store is asked for
        the thread's branches (a loopback round trip hidden behind the
        deserializing); it is the answer if nothing was appended since,
        else the store's checkpoint is read as usual (and the next read
        waits for the answer before making its tuple)."""
        cp = th.checkpoints.get((ns, cp_id)) if cp_id else th.newest(ns)
        asked = self._branches(th)
        made = None
        # Not when the last read found another writer's (workers taking
        # turns on a thread): the tuple would be made twice.
        if not th.moved and cp is not None and self._values.get((th.thread_id, cp.ns, cp.id)):
            made = self._tuple(th, cp)
        seen = th.changes
        self._find_newest(th.thread_id, ns, asked.json())
        th.moved = th.changes != seen
        if made is not None and not th.moved:
            return made
        return self._checkpoint(th, ns, cp_id)

    def _threads_listed(self, config: RunnableConfig | None) -> list[ix.Thread]:
        conf = (config or {}).get("configurable") or {}
        if conf.get("thread_id") is not None:
            th = self._find(str(conf["thread_id"]))
            return [] if th is None else [th]
        out = []
        for s in self.store.sessions(agent=ix.AGENT):
            if s.title is None or s.title.startswith((DELETED, PRUNED, REDACTED)):
                continue
            th = self._find(s.title)
            if th is not None:
                out.append(th)
        return out

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        conf = (config or {}).get("configurable") or {}
        ns = conf.get("checkpoint_ns")
        cp_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        with self._lock:
            found: list[tuple[ix.Thread, ix.Checkpoint]] = []
            for th in self._threads_listed(config):
                for cp in th.checkpoints.values():
                    if ns is not None and cp.ns != ns:
                        continue
                    if cp_id is not None and cp.id != cp_id:
                        continue
                    if before_id is not None and cp.id >= before_id:
                        continue
                    if filter and any(cp.metadata.get(k) != v for k, v in filter.items()):
                        continue
                    found.append((th, cp))
        found.sort(key=lambda p: p[1].id, reverse=True)
        if limit is not None:
            found = found[: max(limit, 0)]
        for th, cp in found:
            with self._lock:
                tup = self._tuple(th, cp, handed=False)  # a listing: not gone on from
            yield tup

    # ----- writes ---------------------------------------------------------------

    def _encode(
        self,
        thread_id: str,
        ns: str,
        parent: str | None,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
    ) -> tuple[Stored, dict[str, builtins.list[Any]], bytes, bool]:
        """The checkpoint's values as the cache keeps them, its lists'
        elements, its payload and whether that gives some by its parent's."""
        c: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = c.pop("channel_values")
        present = {ch: values[ch] for ch in c["channel_versions"] if ch in values}
        key = None if parent is None else (thread_id, ns, parent)
        st, ops, objects = self._values.encode(
            key, self.serde.dumps_typed(c), present, new_versions, self._dump
        )
        delta = any(op != "v" for op, _ in ops.values())
        return st, objects, ix.checkpoint_payload(st.skeleton, ops), delta

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        parent = conf.get("checkpoint_id")
        md = _json_safe(get_serializable_checkpoint_metadata(config, metadata))
        key = (thread_id, ns, checkpoint["id"])
        self._coming.add(key)
        with self._lock:
            try:
                self._put_locked(key, parent, md, checkpoint, new_versions)
            finally:
                self._coming.discard(key)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _put_locked(
        self,
        key: tuple[str, str, str],
        parent: str | None,
        md: dict[str, Any],
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
    ) -> None:
        """`put` under the saver's lock."""
        thread_id, ns, cp_id = key
        th = self._thread(thread_id)
        if not th.appends_at(ns, parent, cp_id):
            self._refresh(th)
        known = parent is None or (ns, parent) in th.checkpoints
        st, objects, payload, delta = self._encode(
            thread_id, ns, parent if known else None, checkpoint, new_versions
        )
        again = (ns, cp_id) in th.checkpoints
        self._put_raw(th, ns, cp_id, parent, md, payload, delta)
        if not again:  # a checkpoint put twice reads as first put
            self._values.keep(key, st)
            self._values.handed(key, objects)
        for early in self._early.pop(key, []):
            self._put_writes_locked(th, *early)

    def _put_raw(
        self,
        th: ix.Thread,
        ns: str,
        cp_id: str,
        parent: str | None,
        md: dict[str, Any],
        payload: bytes,
        delta: bool,
    ) -> None:
        """Appends a checkpoint node where it belongs: after its parent, or
        on a new fork from it, or on its namespace's new timeline."""
        branch, fork_at = th.branch_for(ns, parent)
        if branch is None:
            base = ix.branch_base(ns)
            if fork_at is not None:
                name = ix.fork_name(base, set(th.timelines))
                self._fork(th, fork_at, name, ns, parent)
            else:
                self._fork(th, self._ns_origin(th, md), base, ns, None)
                name = base
            branch = name
        d: dict[str, Any] = {"checkpoint": cp_id, "parent": parent, "ns": ns, "metadata": md}
        if delta:
            # Where its chain starts (its parent's does): an ancestor of its node.
            up = th.checkpoints.get((ns, parent or ""))
            d["delta"] = (0 if up is None else th.chain_base(up)) or True
        diag = {ix.DIAG: d}
        line = Line("invoke", payload, ix.CHECKPOINT_FROM, ix.CHECKPOINT_TO, diag)
        self._append(th, branch, line)

    def _ns_origin(self, th: ix.Thread, md: dict[str, Any]) -> str:
        """Where a namespace's timeline forks from: its parent graph's
        checkpoint when known, else the thread's first node."""
        parents = md.get("parents") or {}
        for pns in sorted(parents, key=len, reverse=True):
            cp = th.checkpoints.get((pns, str(parents[pns])))
            if cp is not None:
                return cp.node
        if th.root is None:
            raise RuntimeError(f"thread {th.thread_id!r}: its session has no first node")
        return th.root

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        cp_id = str(conf["checkpoint_id"])
        entries = [(WRITES_IDX_MAP.get(c, i), c, v) for i, (c, v) in enumerate(writes)]
        values = [self.serde.dumps_typed(v) for _, _, v in entries]
        with self._lock:
            th = self._find(thread_id, fresh=False)
            coming = (thread_id, ns, cp_id) in self._coming
            if th is not None and (ns, cp_id) not in th.checkpoints and not coming:
                self._catch_up(th, ns)
            if th is None or (ns, cp_id) not in th.checkpoints:
                # Its checkpoint is still being put (or never will be, as
                # with any saver that keeps writes of unknown checkpoints).
                early = self._early.setdefault((thread_id, ns, cp_id), [])
                early.append((ns, cp_id, task_id, task_path, entries, values))
                return
            self._put_writes_locked(th, ns, cp_id, task_id, task_path, entries, values)

    def _put_writes_locked(
        self,
        th: ix.Thread,
        ns: str,
        cp_id: str,
        task_id: str,
        task_path: str,
        entries: builtins.list[tuple[int, str, Any]],
        values: builtins.list[tuple[str, bytes]],
    ) -> None:
        """Writes what is new (or, for special channels, replaced) of a
        task's writes for a checkpoint the thread has."""
        cp = th.checkpoints[(ns, cp_id)]
        if not all(c in WRITES_IDX_MAP for _, c, _ in entries):
            keep = [i for i, e in enumerate(entries) if (task_id, e[0]) not in cp.writes]
            entries = [entries[i] for i in keep]
            values = [values[i] for i in keep]
        if entries:
            self._put_writes_raw(th, cp, task_id, task_path, entries, values)

    def _put_writes_raw(
        self,
        th: ix.Thread,
        cp: ix.Checkpoint,
        task_id: str,
        task_path: str,
        entries: Sequence[tuple[int, str, Any]],
        values: Sequence[tuple[str, bytes]],
    ) -> None:
        diag = {
            ix.DIAG: {
                "writes_for": cp.id,
                "ns": cp.ns,
                "task_id": task_id,
                "task_path": task_path,
                "writes": [[idx, ch] for idx, ch, _ in entries],
            }
        }
        line = Line("request", ix.writes_payload(values), ix.WRITES_FROM, ix.WRITES_TO, diag)
        node = self._append(th, cp.branch, line)
        self._cache_writes(node["hash"], builtins.list(values))

    # ----- threads as a whole -----------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        with self._lock:
            th = self._find(thread_id)
            if th is not None:
                self._erase(th)

    def _erase(self, th: ix.Thread) -> None:
        """Erases the thread's session (what another session shares stays)."""
        self.store.cli(
            "redact", "--session", th.session, "--reason", "LangGraph", "--by", "langgraph"
        )
        self._threads.pop(th.thread_id, None)
        self._values.forget_thread(th.thread_id)

    def _copy(self, src: ix.Thread, dst: ix.Thread, keep: set[tuple[str, str]] | None) -> None:
        """Appends `src`'s checkpoints (those in `keep`, or all) and their
        writes to `dst`, in the order they were written, payloads as they are
        (the store holds them once), but for one given by a parent left
        behind: that one holds its values whole."""
        for cp in sorted(src.checkpoints.values(), key=lambda c: c.seq):
            if keep is not None and (cp.ns, cp.id) not in keep:
                continue
            delta = cp.delta
            if delta and (cp.ns, cp.parent) in dst.checkpoints:
                payload = self._payload(cp.node)
            else:
                st = self._stored(src, cp)
                ops: dict[str, ix.Op] = {
                    ch: ("v", payload_channel(v)) for ch, v in st.channels.items()
                }
                payload, delta = ix.checkpoint_payload(st.skeleton, ops), False
            self._put_raw(dst, cp.ns, cp.id, cp.parent, cp.metadata, payload, delta)
            copied = dst.checkpoints[(cp.ns, cp.id)]
            by_node: dict[str, list[ix.Write]] = {}
            for w in cp.writes.values():
                by_node.setdefault(w.node, []).append(w)
            for node, ws in by_node.items():
                ws.sort(key=lambda w: w.pos)
                vals = self._write_values(node)
                entries = [(w.idx, w.channel, None) for w in ws]
                values = [vals[w.pos] for w in ws]
                self._put_writes_raw(dst, copied, ws[0].task_id, ws[0].task_path, entries, values)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        with self._lock:
            src = self._find(source_thread_id)
            if src is None or not src.checkpoints:
                return
            self._copy(src, self._thread(target_thread_id), None)

    def _rewrite(self, th: ix.Thread, keep: set[tuple[str, str]]) -> None:
        """Replaces the thread's session by a new one holding only `keep`."""
        new = self._create(th.thread_id, f"{th.thread_id} (rewriting {uuid.uuid4().hex[:8]})")
        self._copy(th, new, keep)
        self._erase(th)
        self._api("PATCH", f"/sessions/{_q(new.session)}", {"title": th.thread_id})
        self._threads[th.thread_id] = new

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: keep_latest or delete")
        with self._lock:
            for thread_id in thread_ids:
                th = self._find(thread_id)
                if th is None:
                    continue
                if strategy == "delete":
                    self._erase(th)
                    continue
                latest: dict[str, ix.Checkpoint] = {}
                for cp in th.checkpoints.values():
                    if cp.ns not in latest or cp.id > latest[cp.ns].id:
                        latest[cp.ns] = cp
                keep = {(cp.ns, cp.id) for cp in latest.values()}
                if len(keep) < len(th.checkpoints):
                    self._rewrite(th, keep)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        runs = set(run_ids)
        if not runs:
            return
        with self._lock:
            for th in self._threads_listed(None):
                keep = {
                    k for k, cp in th.checkpoints.items() if cp.metadata.get("run_id") not in runs
                }
                if len(keep) < len(th.checkpoints):
                    self._rewrite(th, keep)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Each channel's writes along the parent chain of the checkpoint
        (oldest first) and the value at the nearest ancestor that stores
        one; reads only the ancestors the walk needs."""
        if not channels:
            return {}
        conf = config["configurable"]
        ns = conf.get("checkpoint_ns", "")
        collected: dict[str, list[PendingWrite]] = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        with self._lock:
            th = self._find(str(conf["thread_id"]))
            start = None if th is None else self._start(th, ns, get_checkpoint_id(config))
            remaining = set(channels)
            cursor = self._parent(th, start)
            while th is not None and cursor is not None and remaining:
                for w in reversed(self._pending(cursor)):
                    if w[1] in remaining:
                        collected[w[1]].append(w)
                values = self._stored(th, cursor).channels
                for ch in list(remaining):
                    if ch in values:
                        seeds[ch] = self._load(values[ch])
                        remaining.discard(ch)
                cursor = self._parent(th, cursor)
        out: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            entry: DeltaChannelHistory = {"writes": list(reversed(collected[ch]))}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            out[ch] = entry
        return out

    def _start(self, th: ix.Thread, ns: str, cp_id: str | None) -> ix.Checkpoint | None:
        if cp_id:
            return th.checkpoints.get((ns, cp_id))
        return th.newest(ns)

    def _parent(self, th: ix.Thread | None, cp: ix.Checkpoint | None) -> ix.Checkpoint | None:
        if th is None or cp is None or cp.parent is None:
            return None
        return th.checkpoints.get((cp.ns, cp.parent))

    def get_next_version(self, current: Any, channel: None) -> Any:
        """Integer versions (LangGraph's default): a checkpoint keeps its
        values itself, not under (channel, version) as LangGraph's SQL
        savers do, so versions need no random part to stay apart across
        forks; they keep the checkpoint's header short. A thread written
        with string versions goes on with them."""
        if isinstance(current, str):
            return f"{int(current.split('.')[0]) + 1:032}.{random.random():016}"
        return 1 if current is None else int(current) + 1

    # ----- async: the same, in a worker thread ----------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        def collect() -> list[CheckpointTuple]:
            return list(self.list(config, filter=filter, before=before, limit=limit))

        for tup in await asyncio.to_thread(collect):
            yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await asyncio.to_thread(
            lambda: self.get_delta_channel_history(config=config, channels=channels)
        )


class AsyncConvoSaver(ConvoSaver):
    """`ConvoSaver` for asyncio graphs (`ainvoke`, `astream`): every call
    runs in a worker thread; `from_conn_string` is an async context manager."""

    @classmethod
    @asynccontextmanager
    async def from_conn_string(  # type: ignore[override]
        cls, conn_string: PathLike | None = None
    ) -> AsyncIterator[AsyncConvoSaver]:
        store = Store(conn_string)
        try:
            yield cls(store)
        finally:
            await asyncio.to_thread(store.close)
