"""One keep-alive HTTP/1.1 connection to the `convo serve` child a
`Store` started (loopback, its own token): the request written in one
send, the answer's head read with its body.

Hand-written because `http.client` parses every answer's headers with
the `email` package: 0.39 ms a request against 0.22 ms here (a LangGraph
turn makes five). It speaks only what that server answers with: a
`Content-Length` body, a chunked one, or one that ends with the
connection.
"""

from __future__ import annotations

import socket

MAX_HEAD = 64 * 1024
"""The most an answer's status line and headers may take."""


class ProtocolError(ConnectionError):
    """The answer is not HTTP/1.1 as the server writes it."""


class Answer:
    """The answer to a request sent on a `Connection`, read when asked for
    (`get`), or when the connection is next used."""

    __slots__ = ("_conn", "_got", "_method")

    def __init__(self, conn: Connection, method: str) -> None:
        self._conn = conn
        self._method = method
        self._got: tuple[int, bytes] | BaseException | None = None

    def get(self) -> tuple[int, bytes]:
        """The answer's status and body (waits for it)."""
        if self._got is None:
            self._conn._read(self)
        if isinstance(self._got, BaseException):
            raise self._got
        assert self._got is not None
        return self._got


class Connection:
    """A connection opened on first use and kept while the server keeps it.
    One request is out at a time: sending the next reads the last one's
    answer first (no pipelining asked of the server)."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self._addr = (host, port)
        self._host = f"{host}:{port}"
        self._timeout = timeout
        self._sock: socket.socket | None = None
        # What was read past the last answer (bytearray: appends and cuts
        # from the front cost what they move, not the whole buffer).
        self._buf = bytearray()
        self._out: Answer | None = None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        self._buf = bytearray()
        out, self._out = self._out, None
        if out is not None and out._got is None:
            out._got = ConnectionError("the connection was closed before its answer was read")

    def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, bytes]:
        """Sends one request and returns the answer's status and body."""
        return self.send(method, path, headers, body).get()

    def send(self, method: str, path: str, headers: dict[str, str], body: bytes | None) -> Answer:
        """Sends one request; its answer is read when asked for."""
        if self._out is not None:
            self._read(self._out)
        if self._sock is None:
            self._sock = socket.create_connection(self._addr, timeout=self._timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self._host}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        self._sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
        self._out = Answer(self, method)
        return self._out

    def _read(self, answer: Answer) -> None:
        """Reads the answer out on this connection (`answer`'s, unless the
        connection was closed since): into it, or the error that stopped it."""
        if answer is not self._out:
            if answer._got is None:
                answer._got = ConnectionError("the connection was closed before its answer")
            return
        self._out = None
        try:
            answer._got = self._receive(answer._method)
        except Exception as e:
            self.close()
            answer._got = e
        except BaseException:  # an interrupt: the answer is lost with the connection
            self.close()
            answer._got = ConnectionError("interrupted while reading the answer")
            raise

    def _receive(self, method: str) -> tuple[int, bytes]:
        status, fields = self._head()
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            data = b""
        elif "chunked" in fields.get("transfer-encoding", ""):
            data = self._chunked()
        elif "content-length" in fields:
            data = self._exactly(_length(fields["content-length"]))
        else:
            data = self._to_end()
        if fields.get("connection", "").lower() == "close":
            self.close()
        return status, data

    def _fill(self) -> None:
        assert self._sock is not None
        got = self._sock.recv(262144)
        if not got:
            raise ConnectionError("the server closed the connection")
        self._buf += got

    def _head(self) -> tuple[int, dict[str, str]]:
        while (end := self._buf.find(b"\r\n\r\n")) < 0:
            if len(self._buf) > MAX_HEAD:
                raise ProtocolError(f"an answer's head is over {MAX_HEAD} bytes")
            self._fill()
        head = bytes(self._buf[:end]).decode("latin-1")
        del self._buf[: end + 4]
        first, *rest = head.split("\r\n")
        parts = first.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP/1.1 status line: {first[:80]!r}")
        fields: dict[str, str] = {}
        for line in rest:
            name, sep, value = line.partition(":")
            if not sep:
                raise ProtocolError(f"a header line without a colon: {line[:80]!r}")
            fields[name.strip().lower()] = value.strip()
        return int(parts[1]), fields

    def _exactly(self, n: int) -> bytes:
        """The next `n` bytes: a large body is read straight into its
        buffer, copied once."""
        if len(self._buf) >= n:
            data = bytes(self._buf[:n])
            del self._buf[:n]
            return data
        out = bytearray(n)
        have = len(self._buf)
        out[:have] = self._buf
        self._buf.clear()
        view = memoryview(out)
        assert self._sock is not None
        while have < n:
            got = self._sock.recv_into(view[have:], n - have)
            if not got:
                raise ConnectionError("the server closed the connection mid-answer")
            have += got
        return bytes(out)

    def _line(self) -> bytes:
        while (end := self._buf.find(b"\r\n")) < 0:
            if len(self._buf) > MAX_HEAD:
                raise ProtocolError("a chunk's size line is too long")
            self._fill()
        line = bytes(self._buf[:end])
        del self._buf[: end + 2]
        return line

    def _chunked(self) -> bytes:
        out: list[bytes] = []
        while True:
            size = self._line().split(b";", 1)[0].strip()
            try:
                n = int(size, 16)
            except ValueError:
                raise ProtocolError(f"a chunk size that is not hex: {size[:20]!r}") from None
            if n == 0:
                while self._line():  # trailers, up to the empty line
                    pass
                return b"".join(out)
            out.append(self._exactly(n))
            if self._exactly(2) != b"\r\n":
                raise ProtocolError("a chunk not followed by CRLF")

    def _to_end(self) -> bytes:
        assert self._sock is not None
        while got := self._sock.recv(262144):
            self._buf += got
        data = bytes(self._buf)
        self.close()
        return data


def _length(value: str) -> int:
    if not value.isdigit():
        raise ProtocolError(f"a Content-Length that is not a number: {value[:40]!r}")
    return int(value)
