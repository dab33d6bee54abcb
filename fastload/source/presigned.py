"""Range GETs of presigned object URLs over kept-alive connections, one per thread and host.

Why not s3fs for every range: measured on 2 cores (benchmarks/RESULTS.md, "Shards in
S3"), botocore spends about 1 ms of CPU on each request (user-agent string, header
objects, event hooks, XML and date parsing), as much as decoding the image the request
brings. A URL presigned once per object (SigV4 in the query string, through the
filesystem's own `sign`, so credentials, endpoint and region are botocore's) and a plain
`http.client` GET with a Range header cost a small fraction of that. Status codes map
to the errors fsspec raises (404: FileNotFoundError, 403: PermissionError), so callers
retry the same way; a 403 re-signs once (an expired URL).

Example (a server that ignores Range answers 200 with the whole object: its head is kept):
    >>> import http.server, threading, functools, tempfile, os
    >>> folder = tempfile.mkdtemp(); _ = open(os.path.join(folder, "a.bin"), "wb").write(b"0123456789")
    >>> class Quiet(http.server.SimpleHTTPRequestHandler):
    ...     def log_message(self, *args): pass
    >>> server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=folder))
    >>> threading.Thread(target=server.serve_forever, daemon=True).start()
    >>> get_range(f"http://127.0.0.1:{server.server_address[1]}/a.bin", 0, 4)
    b'0123'
    >>> server.shutdown()
"""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from typing import Dict, Tuple

# Seconds a request may wait for the server before it fails (and is retried by the caller).
TIMEOUT_S = 30

_local = threading.local()


def _connection(scheme: str, netloc: str) -> http.client.HTTPConnection:
    connections: Dict[Tuple[str, str], http.client.HTTPConnection] = _local.__dict__.setdefault("connections", {})
    conn = connections.get((scheme, netloc))
    if conn is None:
        kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        conn = connections[(scheme, netloc)] = kind(netloc, timeout=TIMEOUT_S)
    return conn


def _drop(scheme: str, netloc: str) -> None:
    conn = _local.__dict__.get("connections", {}).pop((scheme, netloc), None)
    if conn is not None:
        conn.close()


def get_range(url: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of the object at (presigned) `url`.

    Raises FileNotFoundError (404), PermissionError (403, e.g. an expired URL), OSError
    for any other status, a short answer or a failed connection (which is then closed).
    """
    parts = urllib.parse.urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    conn = _connection(parts.scheme, parts.netloc)
    try:
        conn.request("GET", target, headers={"Range": f"bytes={start}-{end - 1}"})
        response = conn.getresponse()
        data = response.read()
    except (OSError, http.client.HTTPException) as e:
        _drop(parts.scheme, parts.netloc)  # a broken kept-alive connection: a fresh one next time
        raise OSError(f"{type(e).__name__}: {e}") from e
    if response.status == 404:
        raise FileNotFoundError(f"HTTP 404 {response.reason}")
    if response.status == 403:
        raise PermissionError(f"HTTP 403 {response.reason}")
    if response.status == 200 and start == 0 and len(data) >= end:
        data = data[:end]  # a server that ignores Range sends the whole object
    elif response.status != 206:
        _drop(parts.scheme, parts.netloc)
        raise OSError(f"HTTP {response.status} {response.reason}")
    if len(data) != end - start:
        raise OSError(f"got {len(data)} bytes of {end - start}")
    return data
