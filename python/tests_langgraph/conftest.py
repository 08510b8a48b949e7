"""Fixtures of the LangGraph saver's tests: a fresh store on each backend.

`CONVO_BIN` names the `convo` binary under test (scripts/test sets it);
`CONVO_TEST_PG` an admin URL of a PostgreSQL server, on which each test
gets a database of its own (without it the PostgreSQL cases say so and
pass, as the Rust suites do; under CI they fail).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def pg_database() -> Iterator[str | None]:
    admin = os.environ.get("CONVO_TEST_PG")
    if not admin:
        if os.environ.get("CI"):
            raise RuntimeError("CI is set but CONVO_TEST_PG is not: the PostgreSQL cases must run")
        sys.stderr.write("SKIPPED: no PostgreSQL (set CONVO_TEST_PG=postgres://…)\n")
        yield None
        return
    import psycopg

    name = f"convo_lg_{uuid.uuid4().hex}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    try:
        yield admin.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty store's URL on each backend."""
    if request.param == "sqlite":
        yield f"sqlite://{tmp_path / 'convo.db'}"
        return
    gen = pg_database()
    url = next(gen)
    if url is None:
        pytest.skip("no PostgreSQL")
    yield url
    for _ in gen:
        pass
