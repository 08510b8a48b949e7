"""Shared fixtures of the Python package's tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from upstream import Upstream

import convo

# The sample project is run by test_plugin.py as its own pytest session.
collect_ignore = ["sample"]


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    up = Upstream()
    yield up
    up.stop()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[convo.Store]:
    with convo.Store(tmp_path / "convo.db") as s:
        yield s
