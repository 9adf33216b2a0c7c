"""The lifecycle both stand-ins share: a ThreadingHTTPServer on loopback, in a thread."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Self


class LoopbackServer(ThreadingHTTPServer):
    """A threading HTTP server that knows the stand-in it serves."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 standin: object) -> None:
        super().__init__(address, handler)
        self.standin = standin


class LoopbackService:
    """Start, stop and context-manager use of a stand-in served by `handler`.

    Binds `host:port` (port 0: the OS chooses; a restart reuses the chosen port), serves on a
    daemon thread, and `stopping` is set while it shuts down so slow answers can give up.
    """

    handler: type[BaseHTTPRequestHandler]
    thread_name = "standin"

    def __init__(self, host: str, port: int, lock: threading.Lock | threading.RLock) -> None:
        self._host = host
        self._port = port
        self._lock = lock
        self._server: LoopbackServer | None = None
        self._thread: threading.Thread | None = None
        self.stopping = threading.Event()

    def start(self) -> Self:
        """Bind and serve on a background thread; returns ``self``."""
        with self._lock:
            if self._server is not None:
                return self
            self.stopping.clear()
            server = LoopbackServer((self._host, self._port), self.handler, self)
            self._port = int(server.server_address[1])
            self._server = server
            self._thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.05},
                name=f"{self.thread_name}-{self._port}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; what the stand-in stored is kept."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server, self._thread = None, None
        self.stopping.set()
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> Self:
        """Start the server."""
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Stop the server."""
        self.stop()
