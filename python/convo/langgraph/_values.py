"""Checkpoints' channel values as the savers write and read them: a put
gives each channel by its parent's where it can (`_index.Op`), a read
rebuilds a checkpoint from its chain back to a snapshot; both keep what
they made in a cache, so a graph's next step (which reads the checkpoint
just put) reads nothing from the store. A list channel is kept as a
prefix of a list its descendants share (`Seq`): a step costs what it
added, in memory too."""

from __future__ import annotations

import operator
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from convo.langgraph import _index as ix

SNAPSHOT_EVERY = 192
"""A checkpoint whose parent's chain back to a checkpoint holding every
value whole is this long holds every value whole itself: a cold read
walks at most this many payloads (the store's chunks keep a snapshot's
bytes once with the one before, so one costs what changed since)."""
CACHED = 4096
"""How many checkpoints the cache keeps."""
HANDED = 4
"""Of how many checkpoints the cache keeps the Python objects of their
lists (those put, or handed to the graph by a read): the next put after
one of them appends to its list. Weakly where an object allows it (a
LangChain message does): the saver keeps no graph of objects alive
after the graph is done with it (the garbage collector's full passes
walk every object alive, and freeing them would fall in a put)."""

DECODED = 4
"""Of how many lists the cache keeps the elements decoded (`decoded`)."""

Key = tuple[str, str, str]
"""A checkpoint: thread, namespace, id."""


_DEREF = weakref.ReferenceType.__call__


def _ref(e: Any) -> Any:
    try:
        return weakref.ref(e)
    except TypeError:
        return e


def refs(items: list[Any]) -> list[Any]:
    """References to a list's elements: weak where the element allows one
    (a `weakref.ref` then), else the element itself."""
    try:
        return list(map(weakref.ref, items))
    except TypeError:
        return [_ref(e) for e in items]


def same(objects: list[Any], held: list[Any]) -> bool:
    """Whether `objects` starts with the very objects `held` refers to."""
    if len(objects) < len(held):
        return False
    try:
        # Every element held weakly (the usual case): C functions only.
        return all(map(operator.is_, objects, map(_DEREF, held)))
    except TypeError:  # some element is held itself (no weak reference)
        weak = weakref.ReferenceType
        return all(
            (r() if type(r) is weak else r) is o for o, r in zip(objects, held, strict=False)
        )


@dataclass(frozen=True, slots=True)
class Seq:
    """The first `n` elements of `items`, a list that only grows: the
    list of a checkpoint's channel and of its descendants' share it."""

    items: list[ix.Typed]
    n: int

    def extended(self, more: list[ix.Typed]) -> Seq:
        if len(self.items) == self.n:
            self.items.extend(more)
            return Seq(self.items, self.n + len(more))
        return Seq(self.items[: self.n] + more, self.n + len(more))

    def elements(self) -> list[ix.Typed]:
        return self.items if len(self.items) == self.n else self.items[: self.n]


Value = ix.Typed | Seq
"""A channel's value as the cache keeps it."""


def whole(v: ix.Channel) -> Value:
    return Seq(list(v), len(v)) if isinstance(v, list) else v


def payload_channel(v: Value) -> ix.Channel:
    return v.elements() if isinstance(v, Seq) else v


@dataclass(slots=True)
class Stored:
    """One checkpoint's serialized values: its skeleton, each channel, and
    how many payloads back its snapshot is."""

    skeleton: ix.Typed
    channels: dict[str, Value]
    chain: int = 0


class Values:
    """The cache, and the two ways through it."""

    def __init__(self) -> None:
        self._cache: OrderedDict[Key, Stored] = OrderedDict()
        self._objects: OrderedDict[Key, dict[str, list[Any]]] = OrderedDict()
        self._decoded: OrderedDict[int, tuple[list[ix.Typed], list[Any]]] = OrderedDict()

    def get(self, key: Key) -> Stored | None:
        st = self._cache.get(key)
        if st is not None:
            self._cache.move_to_end(key)
        return st

    def keep(self, key: Key, st: Stored) -> None:
        self._cache[key] = st
        self._cache.move_to_end(key)
        while len(self._cache) > CACHED:
            self._cache.popitem(last=False)

    def handed(self, key: Key, objects: dict[str, list[Any]]) -> None:
        """Remembers the list elements of checkpoint `key` the graph holds
        (`objects`: references, as `refs` makes them)."""
        self._objects[key] = objects
        self._objects.move_to_end(key)
        while len(self._objects) > HANDED:
            self._objects.popitem(last=False)

    def decoded(self, items: list[ix.Typed]) -> list[Any]:
        """The elements of a `Seq`'s list decoded so far (kept, never handed
        out: a read hands out `_fresh` copies), for the lists read last."""
        kept = self._decoded.get(id(items))
        if kept is None or kept[0] is not items:
            kept = self._decoded[id(items)] = (items, [])
            while len(self._decoded) > DECODED:
                self._decoded.popitem(last=False)
        self._decoded.move_to_end(id(items))
        return kept[1]

    def forget_thread(self, thread_id: str) -> None:
        self._decoded.clear()
        for k in [k for k in self._cache if k[0] == thread_id]:
            del self._cache[k]
        for k in [k for k in self._objects if k[0] == thread_id]:
            del self._objects[k]

    def encode(
        self,
        parent: Key | None,
        skeleton: ix.Typed,
        values: Mapping[str, Any],
        changed: Mapping[str, Any],
        dump: Callable[[Any], ix.Channel],
    ) -> tuple[Stored, dict[str, ix.Op], dict[str, list[Any]]]:
        """A checkpoint's values given by its parent's where it can
        (`parent`: `None` when it is not in the store): a channel not in
        `changed` as the parent's, a list that starts with the parent's
        elements (the same objects) as the elements after them, any other
        channel whole. Returns what the cache keeps of it, references to
        the lists' elements (for the next put) and the payload's ops."""
        known = None if parent is None else self.get(parent)
        handed = {} if parent is None else self._objects.get(parent, {})
        st = Stored(skeleton, {}, 0 if known is None else known.chain + 1)
        objects: dict[str, list[Any]] = {}
        ops: dict[str, ix.Op] = {}
        for ch, v in values.items():
            prev = None if known is None else known.channels.get(ch)
            objs = handed.get(ch)
            if prev is not None and ch not in changed:
                st.channels[ch] = prev
                if objs is not None:
                    objects[ch] = objs
                ops[ch] = ("p", None)
                continue
            if isinstance(v, list) and isinstance(prev, Seq) and objs is not None and same(v, objs):
                added = dump(v[len(objs) :])
                if isinstance(added, list):
                    st.channels[ch] = prev.extended(added)
                    ops[ch] = ("a", added)
                    objects[ch] = objs + refs(v[len(objs) :])
                    continue
            dumped = dump(v)
            st.channels[ch] = whole(dumped)
            ops[ch] = ("v", dumped)
            if isinstance(v, list):
                objects[ch] = refs(v)
        if st.chain >= SNAPSHOT_EVERY:
            st.chain = 0
            ops = {ch: ("v", payload_channel(c)) for ch, c in st.channels.items()}
        return st, ops, objects

    @staticmethod
    def apply(parent: Stored | None, skeleton: ix.Typed, ops: dict[str, ix.Op]) -> Stored:
        """A checkpoint's values from its payload's ops and its parent's."""
        whole_values = all(op == "v" for op, _ in ops.values())
        st = Stored(skeleton, {}, 0 if parent is None or whole_values else parent.chain + 1)
        for ch, (op, v) in ops.items():
            if op == "v" and v is not None:
                st.channels[ch] = whole(v)
                continue
            prev = None if parent is None else parent.channels.get(ch)
            if prev is None:
                raise ValueError(f"channel {ch!r} is given by a parent checkpoint that lacks it")
            if op == "p":
                st.channels[ch] = prev
            elif isinstance(prev, Seq) and isinstance(v, list):
                st.channels[ch] = prev.extended(v)
            else:
                raise ValueError(f"channel {ch!r} appends to a value that is not a list")
        return st
