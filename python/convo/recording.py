"""`convo.record()` and `convo.replay()`: every LLM call a block makes,
through a `convo proxy` child on a free loopback port."""

from __future__ import annotations

import os
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from convo import _process
from convo.models import Session
from convo.store import PathLike, Store, store_url

OPENAI_DEFAULT = "https://api.openai.com/v1"
ANTHROPIC_DEFAULT = "https://api.anthropic.com"
# The variables a block's SDKs read, pointed at the proxy inside it.
ENV_VARS = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")


@dataclass
class Recording:
    """A running `record()` or `replay()` block.

    `session` is the session's title as given (or made up); `branch` the
    timeline calls land on; `url` the proxy's address; `openai_base_url`
    and `anthropic_base_url` what the block's clients were pointed at.
    After the block, `store.session(rec.session)` finds the session.
    """

    session: str
    branch: str
    store: Store
    url: str
    openai_base_url: str
    anthropic_base_url: str
    ready_ms: float
    stderr: str = field(default="", repr=False)

    def info(self) -> Session:
        """The recorded session (looked up by title)."""
        return self.store.session(self.session)


def _upstreams(openai: str | None, anthropic: str | None) -> tuple[str, str]:
    return (
        openai or os.environ.get("OPENAI_BASE_URL") or OPENAI_DEFAULT,
        anthropic or os.environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_DEFAULT,
    )


@contextmanager
def _pointed(env: dict[str, str]) -> Iterator[None]:
    """Sets environment variables for a block and restores them after."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def _proxy(
    args: list[str],
    session: str,
    branch: str,
    store: Store,
    extra_env: dict[str, str],
) -> Iterator[Recording]:
    started = time.perf_counter()
    server = _process.ServerProcess(
        ["proxy", "--listen", "127.0.0.1:0", "--quiet", *args], url=store.url
    )
    ready_ms = (time.perf_counter() - started) * 1000
    quoted = [urllib.parse.quote(part, safe="") for part in (session, branch)]
    base = f"{server.url}/s/{quoted[0]}/{quoted[1]}"
    rec = Recording(session, branch, store, server.url, base + "/v1", base, ready_ms)
    env = {"OPENAI_BASE_URL": rec.openai_base_url, "ANTHROPIC_BASE_URL": rec.anthropic_base_url}
    env.update(extra_env)
    try:
        with _pointed(env):
            yield rec
    finally:
        server.stop()
        rec.stderr = server.stderr()


def _store(store: Store | PathLike | None) -> Store:
    return store if isinstance(store, Store) else Store(store_url(store))


@contextmanager
def record(
    session: str | None = None,
    *,
    branch: str = "main",
    store: Store | PathLike | None = None,
    upstream: str | None = None,
    anthropic_upstream: str | None = None,
) -> Iterator[Recording]:
    """Records every OpenAI- and Anthropic-SDK call the block makes.

    Starts `convo proxy` on a free loopback port, points
    `OPENAI_BASE_URL` and `ANTHROPIC_BASE_URL` at it (calls land on
    `session`/`branch`; a new title creates the session), forwards to
    what those variables held before (the providers' own URLs when
    unset) or to `upstream` / `anthropic_upstream`, and restores them
    after. `session` defaults to `record-<time>`.
    """
    title = session or time.strftime("record-%Y%m%dT%H%M%S") + f"-{os.getpid()}"
    openai, anthropic = _upstreams(upstream, anthropic_upstream)
    args = ["--upstream", openai, "--anthropic-upstream", anthropic]
    with _proxy(args, title, branch, _store(store), {}) as rec:
        yield rec


@contextmanager
def replay(
    session: str,
    *,
    branch: str = "main",
    on_miss: Literal["error", "live"] = "error",
    store: Store | PathLike | None = None,
    upstream: str | None = None,
    anthropic_upstream: str | None = None,
    match_ignore: list[str] | None = None,
    repeats: bool = False,
) -> Iterator[Recording]:
    """Answers the block's calls from the recorded timeline `session`/`branch`.

    A call that matches no recorded call fails with a 400 whose JSON
    names the closest recorded call and the JSON pointers that differ
    (`on_miss="error"`), or goes live to the upstream and is recorded on a
    new timeline `live-N` forked before that call (`on_miss="live"`).
    `match_ignore` lists JSON pointers left out when matching
    (`/body/temperature`, `/headers/openai-beta`). Clients without an API
    key get a placeholder one, so the block runs with no secrets.
    """
    st = _store(store)
    openai, anthropic = _upstreams(upstream, anthropic_upstream)
    args = ["--replay", session, "--replay-branch", branch, "--on-miss", on_miss]
    for pointer in match_ignore or []:
        args += ["--match-ignore", pointer]
    if repeats:
        args.append("--replay-repeats")
    if on_miss == "live":
        args += ["--upstream", openai, "--anthropic-upstream", anthropic]
    keys = {
        k: "convo-replay" for k in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY") if not os.environ.get(k)
    }
    with _proxy(args, session, branch, st, keys) as rec:
        yield rec
