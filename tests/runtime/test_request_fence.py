"""Every write of a request onto its socket runs inside the leader's ``hold`` (agent/httpfence.py): for
vast.ai, the demand source and the model (the openai SDK's own HTTP client), a request whose turn comes
after another daemon took the fleet over is never written, not one byte (a real server on 127.0.0.1
counting what arrives; the real file lock)."""

from __future__ import annotations

import json
import re
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.clients.demand import DemandClient
from agent.clients.vast import VastClient
from agent.model.llm import OpenAIChat
from agent.runtime.leader import FileLeader, LeadershipLost, LeaseBusy

REPLIES = {
    "/api/v1/instances/": {"instances": []},
    "/demand": {"pending": 0, "running": 0, "completed": 0},
    "/v1/chat/completions": {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                          "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
    "/v1/models": {"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": "t"}]},
}


class CountingServer(socketserver.ThreadingTCPServer):
    """Plain HTTP/1.1 over TCP that counts every byte it reads and every request it answers."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.bytes = 0
        self.requests: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def seen(self) -> tuple[int, int]:
        with self.lock:
            return self.bytes, len(self.requests)


class _Handler(socketserver.BaseRequestHandler):
    server: CountingServer

    def handle(self) -> None:
        buf = b""
        while True:
            data = self.request.recv(65536)
            if not data:
                return
            with self.server.lock:
                self.server.bytes += len(data)
            buf += data
            while b"\r\n\r\n" in buf:
                head, rest = buf.split(b"\r\n\r\n", 1)
                m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                n = int(m.group(1)) if m else 0
                if len(rest) < n:
                    break
                buf = rest[n:]
                line = head.split(b"\r\n", 1)[0].decode()
                with self.server.lock:
                    self.server.requests.append(line)
                path = line.split()[1].split("?", 1)[0]
                body = json.dumps(REPLIES.get(path, {})).encode()
                self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


@pytest.fixture
def server() -> Iterator[CountingServer]:
    srv = CountingServer()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def leaders(tmp_path: Path) -> Iterator[tuple[FileLeader, FileLeader]]:
    """The holder, and a standby that will find the holder's heartbeat older than failover_seconds."""
    holder = FileLeader(tmp_path / "data", "fleet-1", failover_seconds=30.0)
    taker = FileLeader(tmp_path / "data", "fleet-1", failover_seconds=30.0, clock=lambda: time.time() + 31)
    assert holder.try_acquire()
    yield holder, taker
    taker.release()
    holder.release()


def _clients(url: str, hold: Any) -> dict[str, tuple[Any, Callable[[Any], object]]]:
    return {
        "vast": (VastClient(url, "k" * 64, max_attempts=1, min_interval=0, hold=hold), lambda c: c.list_instances()),
        "demand": (DemandClient(f"{url}/demand", hold=hold), lambda c: c.get()),
        "model": (OpenAIChat(base_url=f"{url}/v1", model="m", api_key="k", hold=hold), lambda c: c.list_models()),
    }


@pytest.mark.parametrize("which", ["vast", "demand", "model"])
def test_a_request_whose_write_comes_after_a_takeover_is_never_written(server: CountingServer, which: str,
                                                                       leaders: tuple[FileLeader, FileLeader]):
    """The holder's client sends one request; then the fleet is taken over at the worst moment, after the
    client's own fence (vast.ai, demand: the check before the request is built) passed and before the
    bytes go out (as a daemon suspended there and resumed would find it). The write finds the lease not
    the holder's: LeaseBusy, and the server reads not one byte more."""
    holder, taker = leaders
    client, call = _clients(server.url, holder.hold)[which]
    call(client)
    assert server.seen()[1] == 1

    def check_then_taken_over() -> None:
        holder.check()
        assert taker.try_acquire()

    if which == "model":  # the SDK has no hook before its write: the takeover simply comes first
        assert taker.try_acquire()
    else:
        client.fence = check_then_taken_over
    before = server.seen()
    with pytest.raises(LeaseBusy, match="now held by"):
        call(client)
    with pytest.raises(LeadershipLost):  # and from now on the check before it refuses too
        call(client)
    assert server.seen() == before
    assert holder.lost is not None


@pytest.mark.parametrize("which", ["vast", "demand"])
def test_without_the_write_fence_the_check_before_the_request_lets_it_leave(server: CountingServer,
                                                                            which: str,
                                                                            leaders: tuple[FileLeader, FileLeader]):
    """The gap the write fence closes: with only the check before the request (no ``hold``), a takeover
    between that check and the write lets the request reach the server."""
    holder, taker = leaders
    client, call = _clients(server.url, None)[which]

    def check_then_taken_over() -> None:
        holder.check()
        assert taker.try_acquire()

    client.fence = check_then_taken_over
    call(client)
    assert server.seen()[1] == 1


def test_a_large_body_is_written_in_held_pieces_each_checked(server: CountingServer,
                                                             leaders: tuple[FileLeader, FileLeader]):
    """A model request larger than one held piece (64 KiB) is written piece by piece, each under the lock:
    all of it arrives while the lease is the holder's."""
    holder, _ = leaders
    held: list[int] = []

    def counting_hold(action: Callable[[], Any]) -> Any:
        held.append(1)
        return holder.hold(action)

    chat = OpenAIChat(base_url=f"{server.url}/v1", model="m", api_key="k", hold=counting_hold)
    reply = chat.complete([{"role": "user", "content": "x" * 300_000}], [])
    assert reply.text == "ok"
    assert server.seen()[0] > 300_000
    assert len(held) >= 5
