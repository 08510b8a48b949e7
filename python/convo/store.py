"""`convo.Store`: the store's sessions, timelines, nodes and state.

A `Store` starts one `convo serve` child on a free loopback port with a
random token the first time it is used, and talks to its HTTP API
(`/api/v1`, keep-alive connections, one per thread); `close()` (or the
end of a `with` block, or the interpreter's exit) stops it. Import and
export of recordings run the CLI once each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar, Union

from convo import _http, _process
from convo.errors import ConvoError, from_http
from convo.models import (
    JSON,
    Branch,
    Forked,
    Imported,
    Line,
    Node,
    Promoted,
    SearchHit,
    Session,
    StateView,
    Timeline,
    VerifyReport,
)

T = TypeVar("T")
P = ParamSpec("P")
PathLike = Union[str, "os.PathLike[str]"]


def store_url(url_or_path: PathLike | None) -> str | None:
    """A store URL from a URL or a path to a SQLite file; `None` stays
    `None` (the CLI's default store: `CONVO_STORE`, else `~/.convo/convo.db`)."""
    if url_or_path is None:
        return None
    s = os.fspath(url_or_path)
    if "://" in s:
        return s
    return "sqlite://" + str(Path(s).expanduser().resolve())


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


class _Api:
    """The HTTP client of one `convo serve` child."""

    def __init__(self, url: str | None) -> None:
        self._token = secrets.token_urlsafe(24)
        self._server = _process.ServerProcess(
            ["serve", "--listen", "127.0.0.1:0", "--quiet"],
            url=url,
            env={"CONVO_TOKEN": self._token},
        )
        parsed = urllib.parse.urlsplit(self._server.url)
        self._host, self._port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self._local = threading.local()

    def _conn(self) -> _http.Connection:
        c: _http.Connection | None = getattr(self._local, "conn", None)
        if c is None:
            c = _http.Connection(self._host, self._port, timeout=600)
            self._local.conn = c
        return c

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
    ) -> bytes:
        return self.send(method, path, query=query, body=body, content_type=content_type).body()

    def send(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
    ) -> Pending:
        """Sends a request on this thread's connection; its answer is read
        when asked for (`Pending.body`), so the caller can work meanwhile."""
        if query:
            kept = {k: v for k, v in query.items() if v is not None}
            if kept:
                path += "?" + urllib.parse.urlencode(kept)
        headers = {"Authorization": f"Bearer {self._token}"}
        if body is not None:
            headers["Content-Type"] = content_type
        return Pending(self, method, path, headers, body)

    def _exchange(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None, retry: bool
    ) -> _http.Answer:
        """Sends the request, again on a new connection if this one fails
        (`retry`: once)."""
        while True:
            conn = self._conn()
            try:
                return conn.send(method, path, headers, body)
            except OSError:  # ConnectionError, a timeout
                self._broken()
                if not retry:
                    raise
                retry = False

    def _broken(self) -> None:
        """Drops this thread's connection (a failed one), raising if the
        server is gone."""
        conn: _http.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None
        self._server.check_alive()

    def json(self, method: str, path: str, payload: Any = None, **kw: Any) -> Any:
        body = None if payload is None else json.dumps(payload).encode()
        return json.loads(self.request(method, "/api/v1" + path, body=body, **kw))

    def close(self) -> None:
        self._server.stop()


class Pending:
    """A request sent to the server, its answer read by `body` (the
    request sent once more, on a new connection, if the first failed)."""

    __slots__ = ("_answer", "_api", "_request")

    def __init__(
        self, api: _Api, method: str, path: str, headers: dict[str, str], body: bytes | None
    ) -> None:
        self._api = api
        self._request = (method, path, headers, body)
        self._answer = api._exchange(method, path, headers, body, retry=True)

    def body(self) -> bytes:
        """The answer's body; a `ConvoError` for an error status."""
        try:
            status, data = self._answer.get()
        except OSError:  # ConnectionError, a timeout, an answer not HTTP
            self._api._broken()
            status, data = self._api._exchange(*self._request, retry=False).get()
        if status >= 400:
            raise from_http(status, data)
        return data

    def json(self) -> Any:
        return json.loads(self.body())


class Store:
    """A convo store (default: the one the CLI uses).

    `url_or_path` is a store URL (`sqlite:///…`, `postgres://…`) or the
    path of a SQLite file (created when missing). Sessions are named by
    id, unique id prefix or title; nodes by hash or unique prefix.
    """

    def __init__(self, url_or_path: PathLike | None = None) -> None:
        self.url = store_url(url_or_path)
        self._api: _Api | None = None
        self._lock = threading.Lock()

    # ----- lifetime -------------------------------------------------------

    def _http(self) -> _Api:
        with self._lock:
            if self._api is None:
                self._api = _Api(self.url)
            return self._api

    def close(self) -> None:
        """Stops the store's server (the next call starts another)."""
        with self._lock:
            api, self._api = self._api, None
        if api is not None:
            api.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def cli(self, *args: str, stdin: bytes | None = None) -> bytes:
        """Runs `convo --store URL ARGS…` once and returns its stdout."""
        return _process.run(list(args), url=self.url, stdin=stdin)

    # ----- sessions -------------------------------------------------------

    def sessions(self, *, query: str | None = None, agent: str | None = None) -> list[Session]:
        """Every session (newest first), optionally filtered by text or agent."""
        out: list[Session] = []
        offset: int | None = 0
        while offset is not None:
            page = self._http().json(
                "GET",
                "/sessions",
                query={"q": query, "agent": agent, "offset": offset, "limit": 1000},
            )
            out.extend(Session.from_json(s) for s in page["sessions"])
            offset = page.get("next_offset")
        return out

    def session(self, session: str) -> Session:
        """One session by id, unique id prefix or title."""
        d = self._http().json("GET", f"/sessions/{_q(session)}")
        return Session.from_json(d["session"])

    def new_session(self, agent: str, title: str | None = None) -> Session:
        """Creates a session with an empty `main`."""
        return Session.from_json(
            self._http().json("POST", "/sessions", {"agent": agent, "title": title})
        )

    def retitle(self, session: str, title: str | None) -> Session:
        """Sets (or with `None` removes) a session's title."""
        return Session.from_json(
            self._http().json("PATCH", f"/sessions/{_q(session)}", {"title": title})
        )

    # ----- timelines and nodes ---------------------------------------------

    def branches(self, session: str) -> list[Branch]:
        """The session's timelines, by name."""
        return [
            Branch.from_json(b)
            for b in self._http().json("GET", f"/sessions/{_q(session)}/branches")
        ]

    def timeline(self, session: str, branch: str = "main") -> Timeline:
        """A timeline's nodes, root to head, payloads and turn numbers included."""
        sess = self.session(session)
        nodes: list[Node] = []
        cursor: int | None = 0
        turns = 0
        while cursor is not None:
            page = self._http().json(
                "GET",
                f"/sessions/{_q(sess.id)}/branches/{_q(branch)}/timeline",
                query={"cursor": cursor, "limit": 2000},
            )
            nodes.extend(Node.from_json(n) for n in page["nodes"])
            turns = int(page["turns"])
            cursor = page.get("next_cursor")
        return Timeline(sess, branch, turns, nodes)

    def node(self, hash: str) -> Node:
        """One node by full hash or unique prefix, with its payload."""
        return Node.from_json(self._http().json("GET", f"/nodes/{_q(hash)}"))

    def append(self, session: str, lines: Line | list[Line], *, branch: str = "main") -> list[Node]:
        """Appends messages to a timeline in one transaction (all or none);
        returns the nodes written (payloads not read back)."""
        batch = [lines] if isinstance(lines, Line) else lines
        d = self._http().json(
            "POST",
            f"/sessions/{_q(session)}/branches/{_q(branch)}/nodes",
            [line.to_json() for line in batch],
        )
        return [Node.from_json(n) for n in d["nodes"]]

    def record(
        self,
        session: str,
        kind: str,
        payload: bytes | str,
        *,
        branch: str = "main",
        sender: str | None = None,
        recipient: str | None = None,
        diagnostics: JSON | None = None,
        state: str | None = None,
        sequence: int | None = None,
    ) -> Node:
        """Appends one message (see [`Line`][convo.models.Line])."""
        line = Line(kind, payload, sender, recipient, diagnostics, state, sequence)
        return self.append(session, line, branch=branch)[0]

    def fork(self, session: str, at: str, branch: str) -> Forked:
        """Forks `branch` from `at`: a node hash or prefix, `BRANCH`,
        `BRANCH@TURN` or `BRANCH~N`."""
        d = self._http().json(
            "POST", f"/sessions/{_q(session)}/fork", {"from": at, "branch": branch}
        )
        return Forked(Branch.from_json(d["branch"]), Node.from_json(d["node"]))

    def promote(self, session: str, branch: str) -> Promoted:
        """Makes `branch` the session's `main`; the old `main` is sealed."""
        d = self._http().json("POST", f"/sessions/{_q(session)}/promote", {"branch": branch})
        return Promoted(Node.from_json(d["node"]), d["sealed_as"])

    def diff(self, session: str, a: str, b: str) -> JSON:
        """Two timelines from their fork point (docs/JSON.md, Diff), as JSON."""
        result: JSON = self._http().json(
            "GET", f"/sessions/{_q(session)}/diff", query={"a": a, "b": b}
        )
        return result

    # ----- state ----------------------------------------------------------

    def state(self, session: str, *, branch: str = "main", at: str | None = None) -> StateView:
        """Every key and value of a timeline's state, now or as of node `at`."""
        path = f"/sessions/{_q(session)}/branches/{_q(branch)}/state"
        return StateView.from_json(self._http().json("GET", path, query={"at": at}))

    def state_get(
        self, session: str, key: str, *, branch: str = "main", at: str | None = None
    ) -> bytes | None:
        """One state value, `None` when the key is not set."""
        path = f"/api/v1/sessions/{_q(session)}/branches/{_q(branch)}/state/{_q(key)}"
        try:
            return self._http().request("GET", path, query={"at": at})
        except ConvoError as e:
            if e.kind == "not_found" and "state key" in e.message:
                return None
            raise

    def state_put(self, session: str, key: str, value: bytes | str, *, branch: str = "main") -> str:
        """Sets a key on the working state; returns the new state root."""
        data = value.encode() if isinstance(value, str) else value
        path = f"/api/v1/sessions/{_q(session)}/branches/{_q(branch)}/state/{_q(key)}"
        raw = self._http().request("PUT", path, body=data, content_type="application/octet-stream")
        return str(json.loads(raw)["root"])

    def state_delete(self, session: str, key: str, *, branch: str = "main") -> bool:
        """Removes a key from the working state; returns whether it was there."""
        path = f"/sessions/{_q(session)}/branches/{_q(branch)}/state/{_q(key)}"
        return bool(self._http().json("DELETE", path)["existed"])

    # ----- verify, search, import, export ------------------------------------

    def verify(self) -> VerifyReport:
        """Recomputes every hash and checks every link."""
        return VerifyReport.from_json(self._http().json("GET", "/verify"))

    def search(
        self,
        text: str,
        *,
        session: str | None = None,
        branch: str | None = None,
        agent: str | None = None,
        kind: str | None = None,
        limit: int | None = None,
    ) -> list[SearchHit]:
        """Full-text search over payloads, best hit first."""
        d = self._http().json(
            "GET",
            "/search",
            query={
                "q": text,
                "session": session,
                "branch": branch,
                "agent": agent,
                "kind": kind,
                "limit": limit,
            },
        )
        return [SearchHit.from_json(h) for h in d["hits"]]

    def export(
        self, session: str, *, format: str = "recording", branch: str | None = None
    ) -> bytes:
        """A session in a file format (docs/FORMATS.md). `recording` (the
        default) holds every timeline, node for node with its hash."""
        args = ["export", session, "--format", format]
        if branch is not None:
            args += ["--branch", branch]
        return self.cli(*args)

    def import_(self, data: bytes | PathLike, *, format: str = "recording") -> list[Imported]:
        """Imports a file (its bytes, or a path). A `recording` is checked
        hash by hash: an edited line is refused, naming the line."""
        if isinstance(data, bytes):
            with tempfile.TemporaryDirectory(prefix="convo-import-") as tmp:
                path = os.path.join(tmp, "upload")
                with open(path, "wb") as f:
                    f.write(data)
                out = self.cli("import", path, "--format", format, "--json")
        else:
            out = self.cli("import", os.fspath(data), "--format", format, "--json")
        d = json.loads(out)
        created = [Imported(c["id"], True) for c in d.get("created", [])]
        return created + [Imported(i, False) for i in d.get("existing", [])]


def _in_thread(
    method: Callable[Concatenate[Store, P], T],
) -> Callable[Concatenate[AsyncStore, P], Coroutine[Any, Any, T]]:
    """`Store.method`, awaited: run in a worker thread."""

    async def run(self: AsyncStore, /, *args: P.args, **kw: P.kwargs) -> T:
        return await asyncio.to_thread(method, self.sync, *args, **kw)

    run.__name__, run.__doc__ = method.__name__, method.__doc__
    return run


class AsyncStore:
    """`Store` for asyncio: the same methods, awaited (each runs in a
    worker thread on the same server; connections are per thread)."""

    def __init__(self, url_or_path: PathLike | None = None) -> None:
        self.sync = Store(url_or_path)

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    sessions = _in_thread(Store.sessions)
    session = _in_thread(Store.session)
    new_session = _in_thread(Store.new_session)
    retitle = _in_thread(Store.retitle)
    branches = _in_thread(Store.branches)
    timeline = _in_thread(Store.timeline)
    node = _in_thread(Store.node)
    append = _in_thread(Store.append)
    record = _in_thread(Store.record)
    fork = _in_thread(Store.fork)
    promote = _in_thread(Store.promote)
    diff = _in_thread(Store.diff)
    state = _in_thread(Store.state)
    state_get = _in_thread(Store.state_get)
    state_put = _in_thread(Store.state_put)
    state_delete = _in_thread(Store.state_delete)
    verify = _in_thread(Store.verify)
    search = _in_thread(Store.search)
    export = _in_thread(Store.export)
    import_ = _in_thread(Store.import_)
