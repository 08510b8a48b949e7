"""The Store's HTTP/1.1 connection (`convo._http`) against a scripted
server: answers split across sends, chunked and close-delimited bodies,
keep-alive, and answers that are not HTTP."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from convo._http import Connection, ProtocolError


@contextmanager
def scripted(answers: list[list[bytes]]) -> Iterator[tuple[int, list[bytes]]]:
    """A loopback server that answers each request on one connection with
    the next answer's pieces (sent one by one), then closes; the requests'
    heads are collected."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    heads: list[bytes] = []

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            buf = b""
            for pieces in answers:
                while b"\r\n\r\n" not in buf:
                    buf += conn.recv(65536)
                head, _, buf = buf.partition(b"\r\n\r\n")
                heads.append(head)
                for p in pieces:
                    conn.sendall(p)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield port, heads
    finally:
        t.join(timeout=5)
        srv.close()


def test_keep_alive_bodies_by_length_and_by_chunks() -> None:
    answers = [
        [b"HTTP/1.1 200 OK\r\nContent-Le", b"ngth: 11\r\n\r\nhello", b" world"],
        [
            b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
            b"cde\r\n",
            b"3;ext=1\r\nfgh\r\n0\r\nX-Trailer: 1\r\n\r\n",
        ],
        [b"HTTP/1.1 204 No Content\r\n\r\n"],
        [b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}"],
    ]
    with scripted(answers) as (port, heads):
        c = Connection("127.0.0.1", port, timeout=5)
        assert c.request("GET", "/a?x=1", {"Authorization": "Bearer t"}, None) == (
            200,
            b"hello world",
        )
        assert c.request("POST", "/b", {}, b"{}") == (201, b"abcdefgh")
        assert c.request("DELETE", "/c", {}, None) == (204, b"")
        assert c.request("GET", "/d", {}, None) == (404, b"{}")
        c.close()
    assert heads[0].startswith(b"GET /a?x=1 HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"Authorization: Bearer t" in heads[0]
    assert b"Content-Length: 2" in heads[1]
    assert b"Content-Length" not in heads[2]


def test_a_body_that_ends_with_the_connection() -> None:
    with scripted([[b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall ", b"of it"]]) as (port, _):
        c = Connection("127.0.0.1", port, timeout=5)
        assert c.request("GET", "/", {}, None) == (200, b"all of it")


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 OK 200\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_an_answer_that_is_not_http_is_an_error(answer: bytes) -> None:
    with scripted([[answer]]) as (port, _):
        c = Connection("127.0.0.1", port, timeout=5)
        with pytest.raises(ProtocolError):
            c.request("GET", "/", {}, None)
        c.close()


def test_a_server_that_closes_mid_answer_is_a_connection_error() -> None:
    with scripted([[b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nonly"]]) as (port, _):
        c = Connection("127.0.0.1", port, timeout=5)
        with pytest.raises(ConnectionError):
            c.request("GET", "/", {}, None)
        c.close()


def test_a_large_body_in_many_sends_arrives_whole() -> None:
    body = bytes(range(256)) * (64 * 4096)  # 64 MiB
    pieces = [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)]
    pieces += [body[i : i + 1_000_003] for i in range(0, len(body), 1_000_003)]
    chunked = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"]
    chunked += [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces[1:]] + [b"0\r\n\r\n"]
    with scripted([pieces, chunked]) as (port, _):
        c = Connection("127.0.0.1", port, timeout=30)
        assert c.request("GET", "/big", {}, None) == (200, body)
        assert c.request("GET", "/big", {}, None) == (200, body)
        c.close()


def test_an_answer_read_later_or_when_the_next_request_is_sent() -> None:
    """`send` leaves the answer on the connection until asked for: the next
    `send` reads it first, into its own `Answer`."""
    answers = [
        [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst"],
        [b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond"],
        [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nthird"],
    ]
    with scripted(answers) as (port, heads):
        c = Connection("127.0.0.1", port, timeout=5)
        one = c.send("GET", "/1", {}, None)
        two = c.send("GET", "/2", {}, None)
        assert two.get() == (200, b"second")
        assert one.get() == (200, b"first")
        three = c.send("GET", "/3", {}, None)
        assert three.get() == three.get() == (200, b"third")
        c.close()
    assert [h.split(b" ")[1] for h in heads] == [b"/1", b"/2", b"/3"]


def test_an_answer_cut_off_is_an_error_for_its_request_only() -> None:
    with scripted([[b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"]]) as (port, _):
        c = Connection("127.0.0.1", port, timeout=5)
        cut = c.send("GET", "/1", {}, None)
        with pytest.raises(ConnectionError):
            cut.get()
        with pytest.raises(ConnectionError):  # the same error again, not a hang
            cut.get()
