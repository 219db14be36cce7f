"""The leadership fence at the socket: every write of an outgoing HTTP request runs inside ``hold``.

    fenced_transport(hold, **kw) -> httpx.HTTPTransport   a transport whose connections write only through hold
    fence_client(client, hold) -> client                   the same for an httpx.Client built elsewhere (the
                                                           openai SDK's), its proxy transports included

A check before the request is sent (an httpx event hook) leaves a gap: a daemon suspended (SIGSTOP, a frozen
VM) after it and before the bytes leave sends them when it resumes, however long after another daemon took
the fleet over. Here the check and the write are one step: ``hold`` (``agent.runtime.leader.Leader.hold``)
runs the write only while the fleet's lock is ours, and on SQLite's file lock no takeover can happen until
it returns. A refused write raises ``LeaseBusy`` out of the client (nothing of that write reaches the
server; a request refused after its first bytes arrives incomplete, which a server answers with nothing).

Writes are held in pieces of at most ``CHUNK`` bytes, so a large request body (a model's context) never keeps
the lock held while the server is slow to read it.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable, Iterable
from typing import Any

import httpx

Hold = Callable[[Callable[[], Any]], Any]

CHUNK = 64 * 1024  # what one held write sends at most: fits a socket's send buffer, so it does not wait


class FencedStream:
    """A network stream (httpcore's, or httpcore2's under the openai SDK: the same interface) whose writes go
    through ``hold``; reads, TLS and the rest as the stream's own."""

    def __init__(self, inner: Any, hold: Hold) -> None:
        self.inner = inner
        self.hold = hold

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return bytes(self.inner.read(max_bytes, timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        view = memoryview(buffer)
        for at in range(0, max(len(view), 1), CHUNK):
            self.hold(functools.partial(self.inner.write, bytes(view[at:at + CHUNK]), timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> FencedStream:
        return FencedStream(self.inner.start_tls(ssl_context, server_hostname, timeout), self.hold)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class FencedBackend:
    """Opens connections with ``inner`` (a pool's network backend) and hands them out fenced."""

    def __init__(self, inner: Any, hold: Hold) -> None:
        self.inner = inner
        self.hold = hold

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> FencedStream:
        return FencedStream(self.inner.connect_tcp(host, port, timeout, local_address, socket_options), self.hold)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> FencedStream:
        return FencedStream(self.inner.connect_unix_socket(path, timeout, socket_options), self.hold)

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


def _socket_transports() -> tuple[type, ...]:
    """The transport classes that open sockets: httpx's, and the one the openai SDK's httpx2 has."""
    kinds: list[type] = [httpx.HTTPTransport]
    try:
        import httpx2
    except ImportError:  # an openai SDK built on httpx itself
        pass
    else:
        kinds.append(httpx2.HTTPTransport)
    return tuple(kinds)


def _fence_pool(transport: Any, hold: Hold) -> None:
    """Make ``transport``'s connections fenced, when it is one that opens sockets. Another kind (a test's
    in-process transport) writes to no socket and is left as it is."""
    if transport is None or not isinstance(transport, _socket_transports()):
        return
    pool: Any = transport._pool  # type: ignore[attr-defined]
    backend = getattr(pool, "_network_backend", None)
    if backend is None:  # a pool that keeps it elsewhere: a version this module was not written for
        raise RuntimeError(f"cannot fence the HTTP connection pool {type(pool).__module__}.{type(pool).__name__}: "
                           "it has no network backend where httpcore 1.x keeps it")
    if not isinstance(backend, FencedBackend):
        pool._network_backend = FencedBackend(backend, hold)


def fenced_transport(hold: Hold, **kw: Any) -> httpx.HTTPTransport:
    """An ``httpx.HTTPTransport(**kw)`` whose every write to a socket runs inside ``hold``."""
    transport = httpx.HTTPTransport(**kw)
    _fence_pool(transport, hold)
    return transport


def fence_client(client: Any, hold: Hold) -> Any:
    """Fence an httpx (or httpx2) ``Client``'s transport and the transports it mounted (the proxies the
    environment names); the client, for chaining."""
    _fence_pool(client._transport, hold)
    for mounted in client._mounts.values():
        _fence_pool(mounted, hold)
    return client
