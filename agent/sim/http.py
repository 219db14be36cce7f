"""Serving a Simulator over HTTP on 127.0.0.1, and `fleet-agent sim` (serve_forever).

The server only moves bytes: each request goes to `Simulator.handle`, and a reply's delay
is waited out here (cut short when the server stops), so a slow or hanging answer never
holds the simulator's lock.
"""

from __future__ import annotations

import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent import logsetup
from agent.sim.clock import Clock
from agent.sim.realism import Realism
from agent.sim.simulator import Simulator

log = logsetup.get_logger("agent.sim")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes; don't wait for delayed ACKs
    server_version = "vast-sim/1"
    sys_version = ""

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if len(body) < length:  # the connection closed mid-body: no HTTP server hands that to its API
            self.close_connection = True
            return
        srv: _Server = self.server  # type: ignore[assignment]
        headers = {k.lower(): v for k, v in self.headers.items()}
        reply = srv.sim.handle(self.command, self.path, headers, body, srv.base_url)
        if reply.delay > 0 and srv.stopping.wait(reply.delay):
            self.close_connection = True
            return
        if reply.then is not None:
            reply = reply.then()  # delivered late: it acts now, whoever is still waiting
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            for k, v in reply.headers.items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (a timeout): nothing to answer

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _dispatch

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], sim: Simulator) -> None:
        super().__init__(addr, _Handler)
        self.sim = sim
        self.stopping = threading.Event()
        self.base_url = f"http://{addr[0]}:{self.server_address[1]}"


class SimServer:
    """Serve a Simulator on 127.0.0.1 in a daemon thread."""

    def __init__(self, sim: Simulator, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sim = sim
        self._server = _Server((host, port), sim)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self._server.base_url

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def serve(self, sim: Simulator) -> None:
        """Serve ``sim`` from now on, on the same address (a fork switching from replay to its own simulator)."""
        self.sim = sim
        self._server.sim = sim

    def start(self) -> SimServer:
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                            name="vast-sim", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._server.stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"SimServer(url={self.url!r})"


def serve_forever(port: int, seed: int, speed: float, state_file: str | None, api_key: str,
                  realism: Realism | None = None, clock: Clock | None = None) -> None:
    """Run the simulator until SIGTERM/SIGINT, saving state periodically and on exit. With a ManualClock
    time moves only through POST /_sim/advance."""
    sim = Simulator(seed=seed, speed=speed, api_key=api_key, state_file=state_file, realism=realism, clock=clock)
    server = SimServer(sim, port=port).start()
    stop = threading.Event()

    def _on_signal(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    print(f"vast.ai simulator listening on {server.url}", flush=True)
    print(f"  point fleet-agent at it: vast.url: {server.url} in config.yaml, and the key in the environment:"
          f" VAST_API_KEY={api_key}", flush=True)
    pace = "manual clock (POST /_sim/advance)" if sim.manual else f"speed={speed}"
    print(f"  seed={seed} {pace} state={state_file or '(not persisted)'}", flush=True)
    log.info("sim.started", url=server.url, seed=seed, speed=speed, state_file=state_file)
    try:
        while not stop.wait(30.0):
            sim.save()
    finally:
        server.stop()
        sim.save()
        log.info("sim.stopped", url=server.url, instances=len(sim.instances))
