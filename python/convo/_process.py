"""Running the `convo` binary: one-shot commands, and long-lived servers
(`convo serve`, `convo proxy`) whose first stdout line is their URL."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

from convo._binary import find_convo_bin
from convo.errors import ConvoError, from_exit


def store_args(url: str | None) -> list[str]:
    """`--store URL`, or nothing for the CLI's default store."""
    return [] if url is None else ["--store", url]


def run(args: list[str], *, url: str | None, stdin: bytes | None = None) -> bytes:
    """Runs `convo [--store URL] ARGS` and returns its stdout; a failure
    raises the exception for its exit code."""
    cmd = [find_convo_bin(), *store_args(url), *args]
    p = subprocess.run(cmd, input=stdin, capture_output=True, check=False)
    if p.returncode != 0:
        raise from_exit(p.returncode, p.stderr.decode("utf-8", "replace"))
    return p.stdout


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec function asking Linux to end the child when we die."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except (OSError, AttributeError):
        return None

    def set_pdeathsig() -> None:
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return set_pdeathsig


class ServerProcess:
    """A `convo` server child: started, its URL read from its first stdout
    line, stopped with SIGTERM (it finishes requests in flight)."""

    def __init__(self, args: list[str], *, url: str | None, env: dict[str, str] | None = None):
        cmd = [find_convo_bin(), *store_args(url), *args]
        child_env = dict(os.environ)
        child_env.update(env or {})
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env,
            preexec_fn=_die_with_parent(),
        )
        self._stderr: collections.deque[str] = collections.deque(maxlen=200)
        assert self.proc.stderr is not None and self.proc.stdout is not None
        self._drain = threading.Thread(
            target=self._read_stderr, args=(self.proc.stderr,), daemon=True
        )
        self._drain.start()
        first = self.proc.stdout.readline().decode("utf-8", "replace").strip()
        if not first.startswith("http"):
            code = self.proc.wait()
            self._drain.join(timeout=5)
            raise from_exit(code or 2, self.stderr())
        self.url = first.rstrip("/")

    def _read_stderr(self, pipe: object) -> None:
        for raw in iter(pipe.readline, b""):  # type: ignore[attr-defined]
            self._stderr.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def stderr(self) -> str:
        """The last lines the server wrote on stderr."""
        return "\n".join(self._stderr)

    def stop(self, timeout: float = 10.0) -> None:
        """Stops the server, letting it write what it still holds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._drain.join(timeout=5)

    def check_alive(self) -> None:
        """Raises when the server has exited."""
        code = self.proc.poll()
        if code is not None:
            raise ConvoError("unavailable", f"the convo server exited ({code}): {self.stderr()}")
