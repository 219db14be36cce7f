"""The vast.ai and demand clients send, byte for byte, what ``httpx.Client.request`` sends.

The clients build their requests through agent.clients.prepared (parsed URLs and merged headers kept);
a raw socket on 127.0.0.1 captures what reaches the wire, and the same request sent through a plain
httpx client's ``request`` (what the clients called before) must be the same bytes: request line, every
header in order, body. Repeated calls (the kept URL) and a server that sets a cookie are covered too.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agent.clients.demand import DemandClient
from agent.clients.vast import VastClient

KEY = "k-" + "s3cr3t" * 6


class Capture:
    """An HTTP/1.1 server on a raw socket: records each request's bytes, answers with ``body`` (JSON)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests: list[bytes] = []
        self.body: Any = {}
        self.cookie: str | None = None  # a Set-Cookie header to send with every answer
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _conn(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, rest = buf.split(b"\r\n\r\n", 1)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                while len(rest) < length:
                    rest += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + rest[:length])
                buf = rest[length:]
                payload = json.dumps(self.body).encode()
                extra = f"Set-Cookie: {self.cookie}\r\n".encode() if self.cookie else b""
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(payload)).encode() + b"\r\n" + extra + b"\r\n" + payload)

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture
def cap() -> Iterator[Capture]:
    c = Capture()
    yield c
    c.close()


def _split(raw: bytes) -> tuple[str, str, dict[str, str], bytes]:
    head, body = raw.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ")
    return method, target, dict(line.split(": ", 1) for line in lines[1:]), body


def _reference(cap: Capture, raw: bytes, client: httpx.Client, extra: dict[str, str]) -> bytes:
    """What ``client.request`` (a plain httpx client) sends for the request captured in ``raw``."""
    method, target, headers, body = _split(raw)
    n = len(cap.requests)
    client.request(method, cap.url + target, headers=extra, content=body if method != "GET" else None,
                   timeout=30.0)
    assert len(cap.requests) == n + 1
    return cap.requests[-1]


def _vast_calls(v: VastClient) -> None:
    v.list_instances()
    v.list_instances()  # the second time from the kept URL
    v.current_user()
    v.get_instance(7)
    v.search_offers({"gpu_name": "RTX_4090", "num_gpus": 1}, limit=5, order=[("dph_total", "asc")])
    v.search_offers({"gpu_name": "RTX_4090", "num_gpus": 1}, limit=5, order=[("dph_total", "asc")])
    v.rent(11, image="img:1", disk=20, label="fa-x", onstart="echo hi", env={"A": "b"})
    v.start(7)
    v.stop(7)
    v.set_label(7, "fa-y")
    v.reboot(7)
    v.destroy(7)


def test_vast_requests_are_the_bytes_httpx_request_sends(cap: Capture) -> None:
    """Every VastClient call puts on the wire exactly what httpx.Client.request sends with the same URL,
    Bearer header and JSON body (the client's old way of sending), repeated calls included."""
    cap.body = {"success": True, "new_contract": 99, "instances": [], "offers": [], "id": 1}
    with VastClient(cap.url, KEY, min_interval=0, max_attempts=1) as v:
        _vast_calls(v)
    sent = list(cap.requests)
    assert len(sent) == 12
    ref = httpx.Client(headers={"User-Agent": "fleet-agent/0.1"}, follow_redirects=False)
    for raw in sent:
        method, _, _, _ = _split(raw)
        extra = {"Authorization": f"Bearer {KEY}", "Accept": "application/json"}
        if method != "GET":
            extra["Content-Type"] = "application/json"
        assert _reference(cap, raw, ref, extra) == raw
    ref.close()
    assert sent[0] == sent[1] and sent[4] == sent[5]  # a kept URL sends what the first parse sent
    assert {_split(r)[0] for r in sent} == {"GET", "POST", "PUT", "DELETE"}


def test_cookies_a_server_sets_go_back_as_httpx_sends_them(cap: Capture) -> None:
    """A server that sets a cookie (a load balancer's) gets it back on the next request, exactly as httpx's
    own request building would send it."""
    cap.body = {"instances": [], "id": 1}
    cap.cookie = "lb=abc123; Path=/"
    with VastClient(cap.url, KEY, min_interval=0, max_attempts=1) as v:
        v.current_user()
        v.current_user()
    ours = cap.requests[1]
    assert "Cookie" in _split(ours)[2]
    cap.requests.clear()
    with httpx.Client(headers={"User-Agent": "fleet-agent/0.1"}, follow_redirects=False) as ref:
        extra = {"Authorization": f"Bearer {KEY}", "Accept": "application/json"}
        ref.request("GET", cap.url + "/api/v0/users/current", headers=extra, timeout=30.0)
        ref.request("GET", cap.url + "/api/v0/users/current", headers=extra, timeout=30.0)
    assert cap.requests[1] == ours


def test_demand_request_is_the_bytes_httpx_get_sends(cap: Capture) -> None:
    """DemandClient.get sends what httpx.Client.get sent with the client's Accept header and timeout."""
    cap.body = {"pending": 3, "completed": 1}
    url = cap.url + "/demand?token=t"
    with DemandClient(url) as d:
        assert d.get().pending == 3
        d.get()
    ours = list(cap.requests)
    cap.requests.clear()
    with httpx.Client(timeout=10, headers={"Accept": "application/json"}) as ref:
        ref.get(url)
        ref.get(url)
    assert cap.requests == ours and ours[0] == ours[1]


BODIES = [
    b'{"a": 1, "b": [1.5, -0.0, 1e-7, 12345678901234567890], "c": null, "d": "\\u00e9\\ud83d\\ude00"}',
    b'{"a": 1, "a": 2}', b'{"x": NaN, "y": Infinity}', b'{"big": 123456789012345678901234567890}',
    b'{"f": 1e400}', b'{"s": "\\ud800"}', b'\xef\xbb\xbf{"bom": true}', '{"u16": 1}'.encode("utf-16"),
    b'[1, 2]', b'"text"', b"  {} ", b"",
    b"[18446744073709551616, -9223372036854775809, 9223372036854775807, 1234567890123456789.5]",
]


@pytest.mark.parametrize("body", BODIES)
def test_json_body_decodes_as_response_json(body: bytes) -> None:
    """json_body (orjson, the json module deciding what orjson refuses) gives resp.json()'s value, or fails
    with a ValueError where resp.json() does."""
    from agent.clients.prepared import json_body

    resp = httpx.Response(200, content=body)
    try:
        want: Any = ("ok", resp.json())
    except ValueError:
        want = ("error",)
    try:
        got: Any = ("ok", json_body(resp))
    except ValueError:
        got = ("error",)
    assert repr(got) == repr(want)


def test_json_body_refuses_broken_json() -> None:
    """A body that is not JSON raises ValueError (what the clients catch to report a bad response)."""
    from agent.clients.prepared import json_body

    with pytest.raises(ValueError):
        json_body(httpx.Response(200, content=b'{"a": '))
