"""convo's errors as Python exceptions.

Every failure of the store, the CLI or the HTTP API becomes a
[`ConvoError`][convo.errors.ConvoError] whose `kind` is convo's error kind
(docs/JSON.md): `invalid`, `ambiguous`, `failed`, `not_found`, `refused`,
`unavailable`, `corrupt`, `unauthorized`, `forbidden`, `too_large`, and
`problem` (a command that ran and found a problem: `verify`, a replay
that diverged). This module is the one place that maps exit codes and
HTTP error documents to exceptions.
"""

from __future__ import annotations

import json


class ConvoError(Exception):
    """A convo failure. `kind` is convo's error kind; `hint` what to do."""

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        hint: str | None = None,
        status: int | None = None,
        exit_code: int | None = None,
    ) -> None:
        super().__init__(message if hint is None else f"{message} (hint: {hint})")
        self.kind = kind
        self.message = message
        self.hint = hint
        self.status = status
        self.exit_code = exit_code


class InvalidError(ConvoError):
    """Bad input, an ambiguous name, a usage error (exit 2; HTTP 400/422)."""


class NotFoundError(ConvoError):
    """No session, branch, node or state key matches (exit 3; HTTP 404)."""


class RefusedError(ConvoError):
    """The store refused: a sealed timeline, an open turn, a taken name (exit 4; HTTP 409)."""


class UnavailableError(ConvoError):
    """The store cannot be reached or its data does not decode (exit 5; HTTP 503/500)."""


class ProblemError(ConvoError):
    """The command ran and found a problem (exit 1): verify failed, a replay diverged."""


class AccessError(ConvoError):
    """The server refused the request: unauthorized, forbidden, too large."""


_CLASS_BY_KIND: dict[str, type[ConvoError]] = {
    "invalid": InvalidError,
    "ambiguous": InvalidError,
    "failed": InvalidError,
    "not_found": NotFoundError,
    "refused": RefusedError,
    "unavailable": UnavailableError,
    "corrupt": UnavailableError,
    "problem": ProblemError,
    "unauthorized": AccessError,
    "forbidden": AccessError,
    "too_large": AccessError,
}

_KIND_BY_EXIT: dict[int, str] = {
    1: "problem",
    2: "invalid",
    3: "not_found",
    4: "refused",
    5: "unavailable",
}


def error(kind: str, message: str, **kw: object) -> ConvoError:
    """The exception for `kind` (an unknown kind gives a plain `ConvoError`)."""
    cls = _CLASS_BY_KIND.get(kind, ConvoError)
    return cls(kind, message, **kw)  # type: ignore[arg-type]


def from_http(status: int, body: bytes) -> ConvoError:
    """The exception for an HTTP API error answer (an `ErrorDoc`)."""
    try:
        doc = json.loads(body)
        err = doc["error"]
        kind, message = str(err.get("kind") or err.get("code")), str(err["message"])
    except (ValueError, KeyError, TypeError, AttributeError):
        kind = {404: "not_found", 409: "refused", 503: "unavailable"}.get(status, "failed")
        message = body.decode("utf-8", "replace").strip() or f"HTTP {status}"
    return error(kind, message, status=status)


def from_exit(code: int, stderr: str) -> ConvoError:
    """The exception for a `convo` command that exited with `code`."""
    message, hint = "", None
    for line in stderr.splitlines():
        if line.startswith("error: ") and not message:
            message = line[len("error: ") :]
        elif line.startswith("hint: ") and hint is None:
            hint = line[len("hint: ") :]
    if not message:
        message = stderr.strip() or f"convo exited with {code}"
    return error(_KIND_BY_EXIT.get(code, "failed"), message, hint=hint, exit_code=code)
