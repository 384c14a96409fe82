"""HTTP/1.1 over a raw socket, as a hostile client sends it: framings an HTTP library would
not produce (chunks past a ``Content-Length``), half-sent requests, trickled bytes."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator


def connect(port: int, host: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection((host, port), timeout=30)


def head(method: str, path: str, port: int, headers: dict[str, str]) -> bytes:
    """A request line and headers (``Host`` first), up to the blank line."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunked(body: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    """``body`` in chunked transfer coding, ``size`` bytes a chunk, then the last chunk."""
    for start in range(0, len(body), size):
        piece = body[start : start + size]
        yield b"%x\r\n" % len(piece) + piece + b"\r\n"
    yield b"0\r\n\r\n"


def read_response(sock: socket.socket, timeout: float = 30.0) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of one response with a Content-Length."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        if not more:
            raise ConnectionError(f"connection closed before a response; got {data!r}")
        data += more
    raw_head, body = data.split(b"\r\n\r\n", 1)
    status_line, *header_lines = raw_head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", 0))
    while len(body) < length:
        more = sock.recv(65536)
        if not more:
            break
        body += more
    return int(status_line.split()[1]), headers, body[:length]


def seconds_until_closed(sock: socket.socket, limit: float, trickle: bytes = b"") -> float | None:
    """Seconds until the server closes the connection (``None``: still open after ``limit``),
    sending ``trickle`` one byte every 50 ms meanwhile (nothing if empty)."""
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < limit:
        try:
            if sent < len(trickle):
                sock.sendall(trickle[sent : sent + 1])
                sent += 1
            sock.settimeout(0.05)
            if sock.recv(65536) == b"":
                return time.monotonic() - start
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - start
    return None
