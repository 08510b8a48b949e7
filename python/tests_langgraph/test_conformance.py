"""LangGraph's own conformance suite (langgraph-checkpoint-conformance)
against both savers on both store backends: every capability, base and
extended, must be detected and pass."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from convo import Store
from convo.langgraph import AsyncConvoSaver, ConvoSaver


@pytest.mark.asyncio
@pytest.mark.parametrize("cls", [ConvoSaver, AsyncConvoSaver])
async def test_every_capability_passes(store_url: str, cls: type[ConvoSaver]) -> None:
    store = Store(store_url)

    @checkpointer_test(name=f"{cls.__name__}-{uuid.uuid4().hex[:6]}")
    async def saver() -> AsyncIterator[ConvoSaver]:
        yield cls(store)

    try:
        report = await validate(saver, progress=ProgressCallbacks.verbose())
    finally:
        store.close()
    report.print_report()
    names = {c.value for c in ALL_CAPABILITIES}
    assert set(report.results) == names
    for name, result in report.results.items():
        assert result.detected, f"{name} not detected"
        assert result.passed, f"{name}: {result.failures}"
        assert result.tests_passed > 0 and result.tests_failed == 0
    assert store.verify().ok
