"""A TCP relay on 127.0.0.1 that can hold back what the server sends (tests only).

    proxy = StallingProxy(port)     relays 127.0.0.1:proxy.port to 127.0.0.1:port
    proxy.hold()                    the server's bytes (and its end of the connection) wait in the relay
    proxy.release()                 ...and go on to the client, in order

What a client sees when it is suspended, or starved of CPU, between asking and reading the answer: an
answer the server sent long before the client reads it.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class StallingProxy:
    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._go = threading.Event()
        self._go.set()
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def hold(self) -> None:
        self._go.clear()

    def release(self) -> None:
        self._go.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self._socks += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, holdable: bool) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = src.recv(65536)
                if holdable:
                    self._go.wait()
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)

    def close(self) -> None:
        self._go.set()
        self._listener.close()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()
