"""Range GETs of presigned object URLs over kept-alive connections, one per thread and host.

Why not s3fs for every range: measured on 2 cores (benchmarks/RESULTS.md, "Shards in
S3"), botocore spends about 1 ms of CPU on each request (user-agent string, header
objects, event hooks, XML and date parsing), as much as decoding the image the request
brings. A URL presigned once per object (SigV4 in the query string, through the
filesystem's own `sign`, so credentials, endpoint and region are botocore's) and a plain
GET with a Range header cost a small fraction of that. The GET is written and its
answer parsed here, on a socket kept alive per thread and host, rather than with
`http.client`: that one parses every answer's headers with the `email` package, about
0.2-0.5 ms of CPU per request (profiled, benchmarks/RESULTS.md), and hands the body back
as a new bytes object; here the body is received straight into one buffer of the
announced length. Status codes map to the errors fsspec raises (404:
FileNotFoundError, 403: PermissionError), so callers retry the same way; a 403 re-signs
once (an expired URL).

Example (a server that ignores Range answers 200 with the whole object: its head is kept):
    >>> import http.server, threading, functools, tempfile, os
    >>> folder = tempfile.mkdtemp(); _ = open(os.path.join(folder, "a.bin"), "wb").write(b"0123456789")
    >>> class Quiet(http.server.SimpleHTTPRequestHandler):
    ...     def log_message(self, *args): pass
    >>> server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=folder))
    >>> threading.Thread(target=server.serve_forever, daemon=True).start()
    >>> bytes(get_range(f"http://127.0.0.1:{server.server_address[1]}/a.bin", 0, 4))
    b'0123'
    >>> server.shutdown()
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
import urllib.parse
from typing import Dict, Optional, Tuple

# Seconds a request may wait for the server before it fails (and is retried by the caller).
TIMEOUT_S = 30
# Response headers larger than this are not an S3 server's.
MAX_HEADER_BYTES = 64 * 1024

_local = threading.local()


class _Connection:
    """One kept-alive HTTP/1.1 connection (TLS for https)."""

    def __init__(self, scheme: str, netloc: str, timeout: float):
        parts = urllib.parse.urlsplit(f"{scheme}://{netloc}")
        host, port = parts.hostname or "", parts.port or (443 if scheme == "https" else 80)
        self.timeout = timeout
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a request is one small write
        if scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.rest = bytearray()  # bytes received past the last answer's end

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionResetError("the server closed the connection")
        self.rest += chunk

    def _line(self) -> bytes:
        while True:
            at = self.rest.find(b"\r\n")
            if at >= 0:
                line = bytes(self.rest[:at])
                del self.rest[:at + 2]
                return line
            if len(self.rest) > MAX_HEADER_BYTES:
                raise OSError("an answer line longer than 64 KiB")
            self._fill()

    def _exactly(self, n: int) -> bytearray:
        """The next n bytes of the answer, received into one buffer."""
        out = bytearray(n)
        have = min(n, len(self.rest))
        out[:have] = self.rest[:have]
        del self.rest[:have]
        view = memoryview(out)
        while have < n:
            got = self.sock.recv_into(view[have:])
            if not got:
                raise ConnectionResetError(f"the server closed the connection after {have} of {n} bytes")
            have += got
        return out

    def get(self, target: str, host: str, start: int, end: int) -> Tuple[int, str, bytearray, bool]:
        """(status, reason, body, keep the connection) of a ranged GET."""
        self.sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nRange: bytes={start}-{end - 1}\r\n"
                          "Accept-Encoding: identity\r\n\r\n".encode("latin-1"))
        status_line = self._line()
        version, _, rest = status_line.partition(b" ")
        code, _, reason = rest.partition(b" ")
        if not version.startswith(b"HTTP/") or not code.isdigit():
            raise OSError(f"not an HTTP answer: {status_line[:80]!r}")
        headers: Dict[bytes, bytes] = {}
        size = 0
        while True:
            line = self._line()
            if not line:
                break
            size += len(line)
            if size > MAX_HEADER_BYTES:
                raise OSError("answer headers larger than 64 KiB")
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        keep = headers.get(b"connection", b"").lower() != b"close" and version != b"HTTP/1.0"
        if headers.get(b"transfer-encoding", b"identity").lower() != b"identity":
            body = bytearray()
            while True:  # chunked
                chunk = int(self._line().split(b";", 1)[0], 16)
                if chunk == 0:
                    while self._line():  # trailers
                        pass
                    break
                body += self._exactly(chunk)
                self._line()
        elif b"content-length" in headers:
            body = self._exactly(int(headers[b"content-length"]))
        else:  # the body runs to the connection's end
            body, keep = bytearray(self.rest), False
            self.rest.clear()
            while True:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    break
                body += chunk
        return int(code), reason.decode("latin-1"), body, keep


def _connection(scheme: str, netloc: str, timeout: float) -> Tuple[_Connection, bool]:
    """This thread's connection to the host, and whether it is new."""
    if _local.__dict__.get("pid") != os.getpid():
        # A forked child's thread inherits its parent's sockets: never shared, its own instead.
        _local.connections, _local.pid = {}, os.getpid()
    connections: Dict[Tuple[str, str], _Connection] = _local.connections
    conn = connections.get((scheme, netloc))
    if conn is not None and conn.timeout == timeout:
        return conn, False
    if conn is not None:
        conn.close()
    conn = connections[(scheme, netloc)] = _Connection(scheme, netloc, timeout)
    return conn, True


def _drop(scheme: str, netloc: str) -> None:
    conn = _local.__dict__.get("connections", {}).pop((scheme, netloc), None)
    if conn is not None:
        conn.close()


def get_range(url: str, start: int, end: int, timeout: Optional[float] = None) -> bytearray:
    """Bytes [start, end) of the object at (presigned) `url`.

    A request waits at most `timeout` seconds (None: TIMEOUT_S) for each answer from
    the server. Raises FileNotFoundError (404), PermissionError (403, e.g. an expired
    URL), OSError for any other status, a short answer, a timeout or a failed connection
    (which is then closed). A kept-alive connection the server closed meanwhile is
    replaced once, at once (not an error).
    """
    parts = urllib.parse.urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    timeout = TIMEOUT_S if timeout is None else float(timeout)
    for attempt in range(2):
        try:
            conn, new = _connection(parts.scheme, parts.netloc, timeout)
        except OSError as e:
            raise OSError(f"{type(e).__name__}: {e}") from e
        try:
            status, reason, data, keep = conn.get(target, parts.netloc, start, end)
            break
        except (OSError, ValueError) as e:
            _drop(parts.scheme, parts.netloc)  # a broken kept-alive connection: a fresh one next time
            # An idle connection the server closed fails before any answer: once more, fresh.
            if new or attempt or isinstance(e, socket.timeout) or not isinstance(e, ConnectionError):
                raise OSError(f"{type(e).__name__}: {e}") from e
    if not keep:
        _drop(parts.scheme, parts.netloc)
    if status == 404:
        raise FileNotFoundError(f"HTTP 404 {reason}")
    if status == 403:
        raise PermissionError(f"HTTP 403 {reason}")
    if status == 200 and start == 0 and len(data) >= end:
        del data[end:]  # a server that ignores Range sends the whole object
    elif status != 206:
        _drop(parts.scheme, parts.netloc)
        raise OSError(f"HTTP {status} {reason}")
    if len(data) != end - start:
        raise OSError(f"got {len(data)} bytes of {end - start}")
    return data
