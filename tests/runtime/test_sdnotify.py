"""agent.service.sdnotify against real AF_UNIX datagram sockets."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agent.service.sdnotify import SystemdNotifier


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A datagram socket bound in tmp_path, standing in for systemd."""
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    try:
        yield sock, str(path)
    finally:
        sock.close()


def test_messages_arrive_byte_exactly(listener):
    """ready, status, watchdog and stopping each send one exact datagram."""
    sock, path = listener
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": path})
    assert notifier.enabled

    assert notifier.ready()
    assert sock.recv(4096) == b"READY=1"
    assert notifier.status("3 instances, balance $12.50")
    assert sock.recv(4096) == b"STATUS=3 instances, balance $12.50"
    assert notifier.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert notifier.stopping()
    assert sock.recv(4096) == b"STOPPING=1"


def test_ready_with_status_and_send_fields(listener):
    """ready(status) and send(**fields) join assignments with newlines, in order."""
    sock, path = listener
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": path})
    notifier.ready("serving")
    assert sock.recv(4096) == b"READY=1\nSTATUS=serving"
    notifier.send(STATUS="x", ERRNO=5)
    assert sock.recv(4096) == b"STATUS=x\nERRNO=5"


def test_newlines_in_status_are_replaced(listener):
    """A newline in status text cannot smuggle in another assignment."""
    sock, path = listener
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": path})
    notifier.status("tick failed\nREADY=1\r\nagain")
    assert sock.recv(4096) == b"STATUS=tick failed READY=1 again"


def test_reloading_carries_monotonic_usec(listener):
    """reloading() sends RELOADING=1 and the current CLOCK_MONOTONIC in microseconds."""
    sock, path = listener
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": path})
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    notifier.reloading()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    first, second = sock.recv(4096).split(b"\n")
    assert first == b"RELOADING=1"
    key, value = second.split(b"=")
    assert key == b"MONOTONIC_USEC"
    assert before <= int(value) <= after


def test_abstract_socket():
    """NOTIFY_SOCKET starting with @ addresses an abstract socket."""
    name = f"fleet-agent-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(5)
    try:
        notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": "@" + name})
        assert notifier.ready()
        assert sock.recv(4096) == b"READY=1"
    finally:
        sock.close()


def test_watchdog_interval_is_half_of_watchdog_usec():
    """WATCHDOG_USEC=120s gives a 60 s keep-alive interval, with or without a matching WATCHDOG_PID."""
    env = {"NOTIFY_SOCKET": "/nonexistent", "WATCHDOG_USEC": "120000000"}
    assert SystemdNotifier.from_env(env).watchdog_interval() == 60.0
    env_pid = {**env, "WATCHDOG_PID": str(os.getpid())}
    assert SystemdNotifier.from_env(env_pid).watchdog_interval() == 60.0
    assert SystemdNotifier.from_env({**env, "WATCHDOG_PID": "4242"}, pid=4242).watchdog_interval() == 60.0


def test_watchdog_interval_none_for_other_pid_or_unset():
    """The watchdog is ignored when WATCHDOG_PID names another process, unset or malformed."""
    env = {"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "120000000", "WATCHDOG_PID": "1"}
    assert SystemdNotifier.from_env(env, pid=4242).watchdog_interval() is None
    assert SystemdNotifier.from_env({"NOTIFY_SOCKET": "/x"}).watchdog_interval() is None
    assert SystemdNotifier.from_env({"WATCHDOG_USEC": "soon"}).watchdog_interval() is None


def test_noop_without_notify_socket(monkeypatch):
    """Without NOTIFY_SOCKET nothing is sent and nothing fails (also when read from os.environ)."""
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    for notifier in (SystemdNotifier.from_env({}), SystemdNotifier.from_env()):
        assert not notifier.enabled
        assert notifier.ready() is False
        assert notifier.status("x") is False
        assert notifier.watchdog() is False
        assert notifier.stopping() is False
        assert notifier.reloading() is False


def test_missing_socket_logs_and_does_not_raise(tmp_path):
    """A socket path that does not exist: send returns False and logs a warning, no exception."""
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    with capture_logs() as logs:
        assert notifier.ready() is False
        assert notifier.status("secretless status") is False
    assert [entry["event"] for entry in logs] == ["notify.send_failed", "notify.send_failed"]
    assert logs[0]["fields"] == ["READY"]
    assert logs[0]["log_level"] == "warning"


def test_unbound_abstract_socket_does_not_raise():
    """An abstract name nobody listens on: send returns False, no exception."""
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": f"@fleet-agent-nobody-{uuid.uuid4().hex}"})
    assert notifier.watchdog() is False


def test_bad_field_name_is_a_programming_error(listener):
    """send() refuses lower-case or malformed keys rather than sending garbage."""
    _, path = listener
    with pytest.raises(ValueError, match="upper case"):
        SystemdNotifier.from_env({"NOTIFY_SOCKET": path}).send(ready=1)


def test_nothing_is_sent_after_stopping(listener):
    """After STOPPING=1 (with its STATUS=) every later send is dropped, from any copy of the notifier:
    the next datagram the socket holds is a marker sent by an unrelated notifier."""
    sock, path = listener
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": path})
    assert notifier.stopping("stopping (SIGTERM)")
    assert sock.recv(4096) == b"STOPPING=1\nSTATUS=stopping (SIGTERM)"
    assert notifier.stopped
    assert notifier.watchdog() is False
    assert notifier.status("tick 3 ok") is False
    assert notifier.ready() is False
    assert notifier.stopping() is False
    assert SystemdNotifier.from_env({"NOTIFY_SOCKET": path}).status("marker")
    assert sock.recv(4096) == b"STATUS=marker"
