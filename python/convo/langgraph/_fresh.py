"""Copies of values decoded once, as new as decoding them again.

A read of a checkpoint hands the graph a list channel's elements (a
thread's messages) to do with as it likes, so each read must give new
objects: decoding every element again is most of a read's cost (a
LangChain message is validated by pydantic each time). The saver keeps
the elements it decoded and gives copies of them instead, made by
`fresh`: a pydantic model copied as its `__copy__` does, each field's
value a new container; a JSON-like value (dicts, lists, scalars) copied
whole. Any other value is `Opaque`: that element is decoded again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

_ATOMS = frozenset({str, int, float, bool, bytes, type(None)})
_MODEL_COPY = BaseModel.__copy__


class Opaque(Exception):
    """A value `fresh` cannot copy: decode it again."""


def tree(v: Any) -> Any:
    """A new copy of a JSON-like value: dicts and lists (tuples) of
    scalars, strings and bytes."""
    t = type(v)
    if t in _ATOMS:
        return v
    if t is dict:
        if not all(type(k) in _ATOMS for k in v):
            raise Opaque
        return {k: tree(x) for k, x in v.items()}
    if t is list:
        return [tree(x) for x in v]
    if t is tuple:
        return tuple(tree(x) for x in v)
    raise Opaque


def fresh(v: Any) -> Any:
    """A copy of a decoded value sharing nothing mutable with it."""
    t = type(v)
    if t in _ATOMS:
        return v
    if getattr(t, "__copy__", None) is not _MODEL_COPY:
        return tree(v)
    if getattr(v, "__pydantic_private__", None) is not None:
        raise Opaque
    new = _MODEL_COPY(v)
    fields = new.__dict__
    for k, x in fields.items():
        if type(x) not in _ATOMS:
            fields[k] = tree(x)
    extra = new.__pydantic_extra__
    if extra:
        object.__setattr__(new, "__pydantic_extra__", tree(extra))
    return new


def fresh_list(decoded: list[Any], n: int, again: Callable[[int], Any]) -> list[Any]:
    """Copies of the first `n` decoded elements; `again(i)` decodes element
    `i` anew where it is `Opaque`."""
    out = []
    for i, v in enumerate(decoded[:n] if len(decoded) > n else decoded):
        try:
            out.append(fresh(v))
        except Opaque:
            out.append(again(i))
    return out
