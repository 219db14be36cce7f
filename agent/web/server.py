"""Serving the console: bind the socket ourselves (a clear error, a known port), then uvicorn.

    WebServer(console, listen).start()     in a thread of the daemon's own process
    WebServer(console, listen).serve()     in the foreground (``fleet-agent web``), until SIGINT/SIGTERM
"""

from __future__ import annotations

import signal
import socket
import threading

import uvicorn

from agent import logsetup
from agent.config import split_listen
from agent.errors import ConfigError
from agent.web.console import Console
from agent.web.routes import create_app

log = logsetup.get_logger(__name__)

STOP_WAIT_S = 5.0


def bind(listen: str) -> socket.socket:
    """A listening socket on ``HOST:PORT`` (port 0: any free port); ConfigError naming the cause."""
    host, port = split_listen(listen)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _type, _proto, _name, addr = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(64)
    except OSError as e:
        raise ConfigError(f"http.listen: cannot listen on {listen}: {e.strerror or e}; choose a free port "
                          "(or null for no endpoint)") from None
    sock.setblocking(False)
    return sock


class WebServer:
    """One console served on one socket."""

    def __init__(self, console: Console, listen: str) -> None:
        self.console = console
        self.sock = bind(listen)
        host, port = self.sock.getsockname()[:2]
        self.url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
        cfg = uvicorn.Config(create_app(console), log_config=None, access_log=False, lifespan="off",
                             server_header=False, timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(cfg)
        self._thread: threading.Thread | None = None

    def start(self) -> WebServer:
        """Serve from a daemon thread (signals stay with the caller's main thread)."""
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, name="http",
                                        daemon=True)
        self._thread.start()
        threading.Thread(target=self.console.warm, name="http-metrics-warmup", daemon=True).start()
        log.info("http.listening", url=self.url, writes="token" if self.console.auth.enabled else "off")
        return self

    def serve(self) -> None:
        """Serve in the foreground until SIGINT/SIGTERM, then stop cleanly (the caller exits 0)."""
        stop = threading.Event()
        old = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start()
            while not stop.wait(0.5):
                if self._thread is not None and not self._thread.is_alive():
                    break
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            self.stop()

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=STOP_WAIT_S)
        self.sock.close()
        self.console.close()
