"""Plain dataclasses for what the store returns (docs/JSON.md's objects)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


def decode_payload(text: str | None, encoding: str | None) -> bytes | None:
    """Bytes from a `payload` + `payload_encoding` pair (`utf8` or `base64`)."""
    if text is None:
        return None
    if encoding == "base64":
        return base64.b64decode(text)
    return text.encode("utf-8")


def encode_payload(data: bytes | str) -> tuple[str, str]:
    """The `payload` + `payload_encoding` pair for bytes or text."""
    if isinstance(data, str):
        return data, "utf8"
    try:
        return data.decode("utf-8"), "utf8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


@dataclass(frozen=True)
class Session:
    """A session: `id` is `ses-{uuid}`."""

    id: str
    agent: str
    title: str | None
    created_at: str

    @classmethod
    def from_json(cls, d: JSON) -> Session:
        return cls(d["id"], d["agent"], d.get("title"), d["created_at"])


@dataclass(frozen=True)
class Branch:
    """A timeline of a session."""

    name: str
    head: str | None
    state: str | None
    sealed: bool
    created_at: str

    @classmethod
    def from_json(cls, d: JSON) -> Branch:
        return cls(d["name"], d.get("head"), d.get("state"), bool(d["sealed"]), d["created_at"])


@dataclass(frozen=True)
class Node:
    """One message (docs/JSON.md, Node). `payload` is `None` when not read."""

    hash: str
    seq: int
    parent: str | None
    kind: str
    session: str
    submission: str | None
    sequence: int | None
    sender: str
    recipient: str
    payload_sha256: str
    payload_len: int
    payload: bytes | None
    diagnostics: JSON
    state: str | None
    created_at: str
    depth: int
    turn: int | None
    branch: str | None
    sealed_as: str | None

    @property
    def text(self) -> str:
        """The payload as text (undecodable bytes replaced); `""` when not read."""
        return (self.payload or b"").decode("utf-8", "replace")

    def json(self) -> Any:
        """The payload parsed as JSON."""
        return json.loads(self.payload or b"null")

    @classmethod
    def from_json(cls, d: JSON) -> Node:
        return cls(
            hash=d["hash"],
            seq=int(d["seq"]),
            parent=d.get("parent"),
            kind=d["kind"],
            session=d["session"],
            submission=d.get("submission"),
            sequence=d.get("sequence"),
            sender=d["from"],
            recipient=d["to"],
            payload_sha256=d["payload_sha256"],
            payload_len=int(d["payload_len"]),
            payload=decode_payload(d.get("payload"), d.get("payload_encoding")),
            diagnostics=d.get("diagnostics") or {},
            state=d.get("state"),
            created_at=d["created_at"],
            depth=int(d.get("depth") or 0),
            turn=d.get("turn"),
            branch=d.get("branch"),
            sealed_as=d.get("sealed_as"),
        )


@dataclass(frozen=True)
class Line:
    """A message to append (`convo ingest`'s line shape).

    `kind` is `invoke`, `request`, `response` or `complete`; `sender` and
    `recipient` default by kind; `state` (complete only) a state root;
    `sequence` (response only) the request it answers.
    """

    kind: str
    payload: bytes | str
    sender: str | None = None
    recipient: str | None = None
    diagnostics: JSON | None = None
    state: str | None = None
    sequence: int | None = None

    def to_json(self) -> JSON:
        text, enc = encode_payload(self.payload)
        d: JSON = {"kind": self.kind, "payload": text, "payload_encoding": enc}
        for key, value in (
            ("from", self.sender),
            ("to", self.recipient),
            ("diagnostics", self.diagnostics),
            ("state", self.state),
            ("sequence", self.sequence),
        ):
            if value is not None:
                d[key] = value
        return d


@dataclass(frozen=True)
class Timeline:
    """A session's timeline: the session, the branch and its nodes, root to head."""

    session: Session
    branch: str
    turns: int
    nodes: list[Node]


@dataclass(frozen=True)
class Forked:
    """What a fork made: the new branch and its fork node."""

    branch: Branch
    node: Node


@dataclass(frozen=True)
class Promoted:
    """What a promote did: the promote node and the name the old `main` got."""

    node: Node
    sealed_as: str


@dataclass(frozen=True)
class StateView:
    """A state version: its root (`None` when empty) and every key's value."""

    root: str | None
    entries: dict[str, bytes]

    @classmethod
    def from_json(cls, d: JSON) -> StateView:
        entries: dict[str, bytes] = {}
        for e in d.get("entries", []):
            entries[e["key"]] = decode_payload(e["value"], e.get("value_encoding")) or b""
        return cls(d.get("root"), entries)


@dataclass(frozen=True)
class SearchHit:
    """One search hit: the node (payload not read), a snippet and where it sits."""

    node: Node
    snippet: str
    score: float
    turn: int | None
    branches: list[str]

    @classmethod
    def from_json(cls, d: JSON) -> SearchHit:
        return cls(
            Node.from_json(d["node"]),
            d["snippet"],
            float(d["score"]),
            d.get("turn"),
            list(d.get("branches") or []),
        )


@dataclass(frozen=True)
class VerifyProblem:
    """What verify found wrong: `kind` to match on, the object, and why."""

    kind: str
    object: str
    reason: str


@dataclass(frozen=True)
class VerifyReport:
    """The result of recomputing every hash and checking every link."""

    ok: bool
    nodes: int
    blobs: int
    branches: int
    problems: list[VerifyProblem] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: JSON) -> VerifyReport:
        problems = [
            VerifyProblem(
                str(p.get("kind", "")), str(p.get("object", "")), str(p.get("reason", ""))
            )
            for p in d.get("problems") or []
        ]
        return cls(
            bool(d["ok"]),
            int(d.get("nodes", 0)),
            int(d.get("blobs", 0)),
            int(d.get("branches", 0)),
            problems,
        )


@dataclass(frozen=True)
class Imported:
    """One session an import wrote (`created` false when it was there already)."""

    id: str
    created: bool
