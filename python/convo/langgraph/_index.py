"""How LangGraph threads sit in a convo store, and what the savers keep in
memory about them.

A thread is a session titled by its `thread_id` (agent `langgraph`); its
first node, on `main`, names the thread. A checkpoint is an `invoke` node
(`langgraph → graph`) whose payload holds the checkpoint (its channel
values given as below) and whose diagnostics (`langgraph`) hold what a
listing needs without the payload: the checkpoint id, its parent's, its
namespace, its metadata and `delta` when the payload gives values by its
parent's: the depth of the node its chain of payloads starts from (below;
`true` when not known). A call to `put_writes` is a `request` node (`task →
graph`) after it, with the writes' values in the payload. Namespace `""`
is `main`; a subgraph's namespace is a timeline of its own (`ns-…`),
forked from its parent graph's checkpoint; a checkpoint whose parent is
not the last one of its timeline (time travel: `update_state` or `invoke`
from an old checkpoint) starts a fork (`…fork-N`) from its parent's node.

The payload holds the checkpoint as LangGraph's serializer writes it, a
list channel (`add_messages`) element by element, and gives a channel by
its parent checkpoint's where it can: `p` (unchanged: not in
`new_versions`), `a` (the parent's list and the elements after it), so a
step costs what it added, not the thread again. A checkpoint whose
parent's values the saver does not have at hand, and every
`_values.SNAPSHOT_EVERY`-th, holds them whole (`v`): a read rebuilds a
checkpoint from its chain back to such a one (one read of the timeline's
stretch: from that depth on, for a saver that has not read the thread). A
payload under `COMPRESS_BELOW` bytes is stored deflated (`…z` magic); a
bigger one as it is, so the store's content-defined chunks share it with
the payloads before it.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

AGENT = "langgraph"
"""The agent name of a thread's session."""
DIAG = "langgraph"
"""The diagnostics key the savers' nodes carry."""
CHECKPOINT_FROM, CHECKPOINT_TO = "langgraph", "graph"
WRITES_FROM, WRITES_TO = "task", "graph"


def branch_base(ns: str) -> str:
    """The timeline of namespace `ns`: `main` for the root graph, else
    `ns-{readable part}-{8 hex of its SHA-256}` (a valid branch name for
    any namespace)."""
    if ns == "":
        return "main"
    readable = re.sub(r"[^A-Za-z0-9_-]+", "-", ns).strip("-")[:48]
    digest = hashlib.sha256(ns.encode()).hexdigest()[:8]
    return f"ns-{readable}-{digest}" if readable else f"ns-{digest}"


def base_of(name: str) -> str:
    """The namespace timeline a branch was forked for (`main` for `fork-N`)."""
    if re.fullmatch(r"fork-\d+", name):
        return "main"
    return re.sub(r"-fork-\d+$", "", name)


def fork_name(base: str, taken: set[str]) -> str:
    """The first `{base}-fork-N` (`fork-N` for `main`) not in `taken`."""
    stem = "fork" if base == "main" else f"{base}-fork"
    n = 1
    while f"{stem}-{n}" in taken:
        n += 1
    return f"{stem}-{n}"


CHECKPOINT_MAGIC_V1 = b"convo-langgraph-checkpoint/1\n"
CHECKPOINT_MAGIC = b"convo-langgraph-checkpoint/2\n"
WRITES_MAGIC = b"convo-langgraph-writes/1\n"
CHECKPOINT_PREFIX, WRITES_PREFIX = b"convo-langgraph-checkpoint/", b"convo-langgraph-writes/"
"""How every version of each payload starts."""
COMPRESS_BELOW = 16 * 1024
"""Payloads shorter than this are deflated."""


def _seal(magic: bytes, body: bytes) -> bytes:
    """`magic` and `body`, deflated when short and smaller so (the magic
    then ends in `z`)."""
    if len(body) < COMPRESS_BELOW:
        packed = zlib.compress(body, 6)
        if len(packed) < len(body):
            return magic[:-1] + b"z\n" + packed
    return magic + body


def _open(magic: bytes, raw: bytes) -> bytes | None:
    """The body of a payload sealed under `magic`, `None` if it is not one."""
    if raw.startswith(magic):
        return raw[len(magic) :]
    zmagic = magic[:-1] + b"z\n"
    if raw.startswith(zmagic):
        return zlib.decompress(raw[len(zmagic) :])
    return None


Typed = tuple[str, bytes]
"""A value as LangGraph's serializer writes it: its type and its bytes."""
Channel = Typed | list[Typed]
"""A channel's value: one typed value, or a list's elements each typed."""
Op = tuple[str, Channel | None]
"""How a checkpoint payload gives one channel: `("v", value)` (the value
itself), `("a", elements)` (its parent's list and these elements after
it) or `("p", None)` (its parent's value)."""


def _frame(t: Typed) -> bytes:
    kind = t[0].encode()
    return bytes([len(kind)]) + kind + len(t[1]).to_bytes(4, "big") + t[1]


_MSGPACK = b"\x07msgpack"
_SIZE = struct.Struct(">I")


def _frames(raw: bytes, at: int, n: int) -> tuple[list[Typed], int]:
    out: list[Typed] = []
    end = len(raw)
    for _ in range(n):
        if at + 5 > end:
            break
        if raw.startswith(_MSGPACK, at):  # the common kind, not decoded again
            kind, at = "msgpack", at + 8
        else:
            k = raw[at]
            kind = raw[at + 1 : at + 1 + k].decode()
            at += 1 + k
        if at + 4 > end:
            break
        (size,) = _SIZE.unpack_from(raw, at)
        at += 4
        if at + size > end:
            break
        out.append((kind, raw[at : at + size]))
        at += size
    if len(out) != n:
        raise ValueError("a checkpoint payload ends early")
    return out, at


def checkpoint_payload(skeleton: Typed, ops: dict[str, Op]) -> bytes:
    """A checkpoint node's payload: a JSON line naming each channel, how
    it is given (`v`, `a`, `p`: see `Op`) and how many frames it has (-1:
    one value, not a list), then the channels' frames (type, length,
    bytes) and last the checkpoint without its channel values (what
    changes at every step sits at the end, so a snapshot shares its
    chunks with the one before). A list's elements are framed one by one."""
    names = sorted(ops)
    head: list[list[Any]] = []
    parts: list[bytes] = []
    for k in names:
        op, v = ops[k]
        items: list[Typed] = [] if v is None else (v if isinstance(v, list) else [v])
        head.append([k, op, len(items) if isinstance(v, list) else (-1 if v else 0)])
        parts.extend(_frame(e) for e in items)
    line = json.dumps(head, separators=(",", ":")).encode()
    return _seal(CHECKPOINT_MAGIC, b"".join([line, b"\n", *parts, _frame(skeleton)]))


def read_checkpoint_payload(raw: bytes) -> tuple[Typed, dict[str, Op]]:
    """The inverse of `checkpoint_payload` (and of version 1's, whose
    channels are all given whole, the skeleton first)."""
    v1 = raw.startswith(CHECKPOINT_MAGIC_V1)
    body = raw[len(CHECKPOINT_MAGIC_V1) :] if v1 else _open(CHECKPOINT_MAGIC, raw)
    if body is None:
        raise ValueError("not a LangGraph checkpoint written by convo")
    raw = body
    end = raw.index(b"\n")
    head = json.loads(raw[:end])
    at = end + 1
    skeleton: Typed | None = None
    if v1:
        (skeleton,), at = _frames(raw, at, 1)
        head = [[name, "v", n] for name, n in head]
    ops: dict[str, Op] = {}
    for name, op, n in head:
        if op not in ("v", "a", "p"):
            raise ValueError(f"a checkpoint payload gives channel {name!r} as {op!r}")
        frames, at = _frames(raw, at, max(n, 1) if n != 0 else 0)
        if op == "p":
            ops[str(name)] = ("p", None)
        else:
            ops[str(name)] = (op, frames if n >= 0 else frames[0])
    if skeleton is None:
        (skeleton,), at = _frames(raw, at, 1)
    return skeleton, ops


def writes_payload(values: Sequence[Typed]) -> bytes:
    """A writes node's payload: each value framed, in the order of the
    diagnostics' `writes`."""
    return _seal(WRITES_MAGIC, b"".join(_frame(v) for v in values))


def read_writes_payload(raw: bytes) -> list[Typed]:
    body = _open(WRITES_MAGIC, raw)
    if body is None:
        raise ValueError("not LangGraph writes written by convo")
    raw = body
    out: list[Typed] = []
    at = 0
    while at < len(raw):
        frames, at = _frames(raw, at, 1)
        out.extend(frames)
    return out


@dataclass(slots=True)
class Write:
    """One pending write: its key is `(task_id, idx)`."""

    task_id: str
    idx: int
    channel: str
    task_path: str
    node: str
    """The writes node holding its value."""
    pos: int
    """Its place in that node's payload."""


@dataclass(slots=True)
class Checkpoint:
    """What a listing needs of one checkpoint (its payload stays in the store)."""

    id: str
    ns: str
    parent: str | None
    metadata: dict[str, Any]
    node: str
    seq: int
    branch: str
    """The first timeline it was read on (one that holds it)."""
    depth: int = 0
    """Its node's depth (the session's first node has depth 1)."""
    delta: bool = False
    """Whether its payload gives channels by its parent's (`a`, `p`)."""
    base: int = 0
    """The depth of the checkpoint its chain of payloads starts from (one
    holding every value whole: its own when not `delta`), 0 when not
    known (see `Thread.chain_base`). That node is an ancestor of its own:
    a cold read takes the timeline from there in one read."""
    writes: dict[tuple[str, int], Write] = field(default_factory=dict)


@dataclass(slots=True)
class Timeline:
    """One branch as last read: its head, how many nodes it has, its
    namespace and the last checkpoint of that namespace on it."""

    name: str
    head: str | None
    length: int
    ns: str | None
    last: str | None
    lo: int | None = 0
    """The position of the first node read (`None`: not read): nodes
    `lo…length` are in the picture."""


@dataclass
class Thread:
    """The savers' picture of one thread's session."""

    thread_id: str
    session: str
    timelines: dict[str, Timeline] = field(default_factory=dict)
    checkpoints: dict[tuple[str, str], Checkpoint] = field(default_factory=dict)
    by_node: dict[str, tuple[str, str]] = field(default_factory=dict)
    root: str | None = None
    """The thread's first node (namespaces with no parent fork from it)."""
    complete: bool = True
    """Whether every timeline was read from its first node. A thread
    opened by a read of its latest checkpoint holds only the ends of its
    namespace's timelines (`Timeline.lo`), read back as far as a chain
    of checkpoints needs; anything else reads it whole first."""
    top: dict[str, Checkpoint] = field(default_factory=dict)
    """Each namespace's checkpoint of the highest id read."""
    orphans: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """Writes nodes read before their checkpoint (a timeline read from its
    end): taken when a read further back finds it."""
    changes: int = 0
    """How many nodes were taken, and resets: a read that leaves it as it
    was found nothing new."""
    moved: bool = False
    """Whether the last look at the store found nodes another writer added."""

    def reset(self, *, complete: bool) -> None:
        """Forgets what was read of the session."""
        self.changes += 1
        self.timelines.clear()
        self.checkpoints.clear()
        self.by_node.clear()
        self.orphans.clear()
        self.top.clear()
        self.root = None
        self.complete = complete

    def timeline(self, name: str) -> Timeline:
        """The timeline named `name`, empty and unread when new."""
        t = self.timelines.get(name)
        if t is None:
            ns = "" if base_of(name) == "main" else None
            lo = 0 if self.complete else None
            t = self.timelines[name] = Timeline(name, None, 0, ns, None, lo)
        return t

    def take(self, t: Timeline, nodes: list[dict[str, Any]]) -> None:
        """Reads nodes `t.length…` of a timeline (as the API lists them)."""
        for n in nodes:
            t.length += 1
            t.head = n["hash"]
            self._take_node(t, n)

    def take_end(self, t: Timeline, nodes: list[dict[str, Any]], total: int) -> None:
        """Reads the last nodes of a timeline of `total` (not read before)."""
        t.length, t.lo = total, total - len(nodes)
        t.head = nodes[-1]["hash"] if nodes else None
        for n in nodes:
            self._take_node(t, n)

    def take_before(self, t: Timeline, nodes: list[dict[str, Any]]) -> None:
        """Reads the nodes just before `t.lo`, in order; then the writes
        read before their checkpoint that these hold."""
        last = t.last
        waiting, self.orphans = self.orphans, []
        for n in nodes:
            self._take_node(t, n)
        t.lo = (t.lo or 0) - len(nodes)
        if last is not None:
            t.last = last
        for node, d in waiting:
            self._take_writes(node, d)

    def _take_node(self, t: Timeline, n: dict[str, Any]) -> None:
        self.changes += 1
        d = (n.get("diagnostics") or {}).get(DIAG)
        if not isinstance(d, dict):
            return
        if "thread" in d and self.root is None:
            self.root = n["hash"]
        elif "checkpoint" in d:
            self._take_checkpoint(t, n, d)
        elif "writes_for" in d:
            self._take_writes(n["hash"], d)

    def _take_checkpoint(self, t: Timeline, n: dict[str, Any], d: dict[str, Any]) -> None:
        ns = str(d.get("ns", ""))
        key = (ns, str(d["checkpoint"]))
        if key not in self.checkpoints:
            self.checkpoints[key] = Checkpoint(
                id=key[1],
                ns=ns,
                parent=d.get("parent"),
                metadata=dict(d.get("metadata") or {}),
                node=n["hash"],
                seq=int(n.get("seq", 0)),
                branch=t.name,
                depth=int(n.get("depth", 0)),
                delta=bool(d.get("delta")),
            )
            cp = self.checkpoints[key]
            base = d.get("delta")
            if not cp.delta:
                cp.base = cp.depth
            elif type(base) is int and base > 0:  # not `true`: where its chain starts
                cp.base = base
            self.by_node[n["hash"]] = key
            top = self.top.get(ns)
            if top is None or key[1] > top.id:
                self.top[ns] = self.checkpoints[key]
        if t.ns is None and branch_base(ns) == base_of(t.name):
            t.ns = ns
        if t.ns == ns:
            t.last = key[1]

    def _take_writes(self, node: str, d: dict[str, Any]) -> None:
        cp = self.checkpoints.get((str(d.get("ns", "")), str(d["writes_for"])))
        if cp is None:
            if not self.complete:
                self.orphans.append((node, d))
            return
        for pos, (idx, channel) in enumerate(d.get("writes", [])):
            key = (str(d["task_id"]), int(idx))
            if key in cp.writes and int(idx) >= 0:
                continue
            cp.writes[key] = Write(
                key[0], key[1], str(channel), str(d.get("task_path", "")), node, pos
            )

    def newest(self, ns: str) -> Checkpoint | None:
        """The namespace's newest checkpoint: of a thread read whole, that
        of the highest id; of one read from its ends, the highest of the last
        checkpoints of its timelines (a child's id is above its parent's),
        `None` when none of them has one."""
        if self.complete:
            return self.top.get(ns)
        lasts = [
            self.checkpoints[(ns, t.last)]
            for t in self.timelines.values()
            if t.lo is not None and t.ns == ns and t.last is not None
        ]
        return max(lasts, key=lambda c: c.id) if lasts else None

    def chain_base(self, cp: Checkpoint) -> int:
        """The depth of the node `cp`'s chain of payloads starts from, as
        far as the checkpoints read tell (0: not read back that far)."""
        walked: list[Checkpoint] = []
        at: Checkpoint | None = cp
        while at is not None and not at.base and at.delta and at.parent is not None:
            walked.append(at)
            at = self.checkpoints.get((at.ns, at.parent))
        base = 0 if at is None else at.base
        for c in walked:
            c.base = base
        return base

    def appends_at(self, ns: str, parent: str | None, cp_id: str) -> bool:
        """Whether a checkpoint `cp_id` of `ns` with parent `parent` goes
        after the last checkpoint of a timeline read: what a thread read
        from its ends can write without reading it whole."""
        if self.complete:
            return True
        if parent is None or cp_id <= parent or (ns, parent) not in self.checkpoints:
            return False
        return any(
            t.lo is not None and t.ns == ns and t.last == parent for t in self.timelines.values()
        )

    def branch_for(self, ns: str, parent: str | None) -> tuple[str | None, str | None]:
        """Where a new checkpoint of `ns` with parent `parent` goes:
        `(branch, None)` to append to an existing timeline, `(None, node)`
        to fork a new one from `node`, `(None, None)` to start the
        namespace's own timeline."""
        base = branch_base(ns)
        if parent is not None and (ns, parent) in self.checkpoints:
            for t in self.timelines.values():
                if t.ns == ns and t.last == parent:
                    return t.name, None
            return None, self.checkpoints[(ns, parent)].node
        if base in self.timelines:
            return base, None
        return None, None
