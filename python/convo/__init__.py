"""convo from Python: the store, recording and replaying LLM calls, and a
pytest plugin (`@pytest.mark.convo`).

    import convo

    with convo.record(session="trip") as rec:
        openai.OpenAI().chat.completions.create(...)   # recorded
    with convo.replay("trip"):
        openai.OpenAI().chat.completions.create(...)   # answered from the record

    store = convo.Store()                              # the CLI's store
    for node in store.timeline("trip").nodes:
        print(node.kind, node.text[:60])
"""

from __future__ import annotations

from convo._binary import find_convo_bin
from convo.errors import (
    AccessError,
    ConvoError,
    InvalidError,
    NotFoundError,
    ProblemError,
    RefusedError,
    UnavailableError,
)
from convo.models import (
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
    VerifyProblem,
    VerifyReport,
)
from convo.recording import Recording, record, replay
from convo.store import AsyncStore, Store

__all__ = [
    "AccessError",
    "AsyncStore",
    "Branch",
    "ConvoError",
    "Forked",
    "Imported",
    "InvalidError",
    "Line",
    "Node",
    "NotFoundError",
    "ProblemError",
    "Promoted",
    "Recording",
    "RefusedError",
    "SearchHit",
    "Session",
    "StateView",
    "Store",
    "Timeline",
    "UnavailableError",
    "VerifyProblem",
    "VerifyReport",
    "find_convo_bin",
    "record",
    "replay",
]
