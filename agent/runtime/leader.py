"""Leadership: exactly one active daemon per fleet; any other one waits as a standby and takes over.

    leader_for(settings, ...) -> Leader     FileLeader (SQLite, one host) or PgLeader (PostgreSQL)
    Leader.try_acquire() -> bool            take the fleet's lock if it is free (or its holder is gone)
    Leader.check()                          the fence: raises LeadershipLost once the lock is not ours
    Leader.hold(action)                     run ``action`` (a COMMIT, a write to a socket) only while the lock
                                            is ours, with no takeover possible meanwhile where the lock allows
    Leader.release()                        give it up (a clean stop)
    Leader.holder() -> str                  who holds it, for errors, ``doctor`` and the log

Both kinds keep a "still held as of T" time that a heartbeat thread renews every ``beat_s``;
``check()`` costs a clock read while that time is under ``fresh_s`` old and runs the synchronous
check (a read of the lease file, a query on the lock's own connection) only when it is older, so a
process that was suspended (SIGSTOP) and resumed checks for real before its next append or call.
T is the monotonic time at which the check *started*, never when its answer arrived: an answer read
after a suspension (sent by the server before it, or read from the lease file just before it) says
the lock was ours back then, not now. A check whose answer took longer than ``lease_s`` vouches for
nothing, and one that cannot be completed in time three times running counts as a lost lock.

FileLeader (the SQLite log, daemons on one host): a lease file ``<data_dir>/fleet-agent.runtime.leader`` (a
random token, pid, host, heartbeat time) read and written under its own short ``flock``, beside the
single-writer ``flock`` of ``agent.runtime.lock.FleetLock`` that ``fleet-agent tick`` and ``backup`` respect.
A standby takes over when the holder's ``FleetLock`` is free (the kernel released it: the holder died),
or when the holder's heartbeat is older than ``failover_seconds`` (it is alive but stopped). A holder
whose token is no longer in the lease has lost.

PgLeader (storage on PostgreSQL, daemons on several hosts): ``agent.store.pglock``'s lock on the fleet's
leadership table (``LOCK TABLE … IN EXCLUSIVE MODE``, which only the fleet's bound roles may take), held in
a transaction that writes nothing on a connection of its own whose ``idle_session_timeout`` is
``failover_seconds / 2``: when the holder stops heartbeating (killed, cut off, suspended) the server
ends its session and frees the lock, and a standby polling it with ``NOWAIT`` gets it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from agent import logsetup
from agent.errors import FleetAgentError, LockError
from agent.runtime.lock import FleetLock
from agent.store import pglock
from agent.store.pglock import identity

log = logsetup.get_logger(__name__)

# check() trusts the last successful check for at most this long (from when it started); older, it
# checks synchronously.
FRESH_S = 1.0
# The lease: a successful check started at T vouches for the lock until T + failover_seconds / 3 at most.
# Sound because no other daemon can get the lock sooner after T: on SQLite a standby needs the heartbeat
# (written after T) older than failover_seconds, on PostgreSQL the server ends the session
# failover_seconds / 2 after its last query (answered after T), and the config keeps failover_seconds at
# 3 s or more.
LEASE_FRACTION = 1 / 3
# Checks in a row whose answer came back too late to vouch for anything before the lock counts as lost.
CHECK_TRIES = 3
LEASE_NAME = "fleet-agent.runtime.leader"
STANDBY_PREFIX = "fleet-agent.runtime.standby."  # + pid: a waiting standby's file, flocked while it lives
_LEASE_SIZE = 1024

T = TypeVar("T")


# While a standby cannot reach the server it says so once, then at most this often, then once when it can.
OUTAGE_WARN_EVERY_S = 60.0


class LeadershipLost(FleetAgentError):
    """This process held the fleet's lock and does not any more: it must append nothing and call nothing."""

    exit_code = 3


class LeaseBusy(LeadershipLost):
    """``hold`` found the fleet's lock not ours (or could not make sure it was): the action did not run."""


class Leader(Protocol):
    """What the daemon needs from a leadership lock."""

    kind: str
    failover_seconds: float
    unreachable: str | None  # set when the last try_acquire could not reach the lock's store at all

    def try_acquire(self) -> bool: ...
    def check(self) -> None: ...
    def hold(self, action: Callable[[], T]) -> T: ...
    def release(self) -> None: ...
    def holder(self) -> str: ...
    def start_heartbeat(self, on_lost: Callable[[str], None]) -> None: ...

    @property
    def held(self) -> bool: ...


class _OutageLog:
    """A standby polls the lock several times a second: while the server is down each poll fails, and a
    warning each would bury the log. One warning as the outage starts, at most one per ``every_s`` while it
    lasts (with the count so far), one when a poll succeeds again."""

    def __init__(self, every_s: float = OUTAGE_WARN_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self.clock = clock
        self.since: float | None = None  # when the current outage started
        self.failures = 0
        self._told_at = 0.0

    def failed(self, error: str) -> None:
        now = self.clock()
        if self.since is None:
            self.since, self.failures, self._told_at = now, 1, now
            log.warning("leader.standby_query_failed", error=error,
                        note=f"polling on; while it fails this is logged at most every {self.every_s:g}s")
            return
        self.failures += 1
        if now - self._told_at >= self.every_s:
            self._told_at = now
            log.warning("leader.standby_query_still_failing", error=error, failures=self.failures,
                        for_s=round(now - self.since, 1))

    def recovered(self) -> None:
        if self.since is None:
            return
        log.warning("leader.standby_query_recovered", failures=self.failures,
                    outage_s=round(self.clock() - self.since, 1))
        self.since, self.failures = None, 0


class _Heartbeat:
    """The shared half: the "held as of" time, the fence, the heartbeat thread."""

    kind = "base"
    unreachable: str | None = None  # why the last try to take the lock could not reach its store

    def __init__(self, failover_seconds: float, beat_s: float | None = None) -> None:
        self.failover_seconds = float(failover_seconds)
        self.beat_s = beat_s if beat_s is not None else min(0.5, self.failover_seconds / 6)
        self.lease_s = self.failover_seconds * LEASE_FRACTION  # how long a check's success can vouch for
        self.fresh_s = min(FRESH_S, self.lease_s)  # how long check() trusts it without checking again
        self._held_at: float | None = None  # monotonic time the last successful check started
        self._lost: str | None = None
        self._io = threading.Lock()  # one check at a time (the heartbeat thread and the fence)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_lost: Callable[[str], None] | None = None
        self.acquired_at: float | None = None
        self.took_because = "free"  # why the lock could be taken (for leader.acquired)

    @property
    def held(self) -> bool:
        return self._held_at is not None and self._lost is None

    @property
    def lost(self) -> str | None:
        """Why the lock was lost, once it was."""
        return self._lost

    def _verify(self) -> str | None:  # pragma: no cover - each kind defines it
        """None while the lock is ours, else why it is not (called with ``_io`` held)."""
        raise NotImplementedError

    def _mark_lost(self, why: str) -> None:
        first = self._lost is None
        self._lost = why
        self._held_at = None
        if first:
            log.error("leader.lost", lock=self.kind, why=why)
            if self._on_lost is not None:
                self._on_lost(why)

    def _renew(self) -> None:
        with self._io:
            if self._lost is not None:
                return
            started = time.monotonic()  # the answer vouches for this moment, however late it is read
            why = self._verify()
            if why is None:
                self._held_at = max(started, self._held_at or started)
            else:
                self._mark_lost(why)

    def _vouched(self, within: float) -> bool:
        held_at = self._held_at
        return self._lost is None and held_at is not None and time.monotonic() - held_at <= within

    def check(self) -> None:
        """The fence: returns while the lock is ours, else raises ``LeadershipLost``. Run before every
        append commits and every request leaves, it returns only when a check that started less than
        ``lease_s`` ago (``fresh_s`` without asking again) found the lock ours."""
        if self._vouched(self.fresh_s):
            return
        for _ in range(CHECK_TRIES):
            if self._lost is not None or self._held_at is None:
                break
            self._renew()
            if self._vouched(self.lease_s):
                return
        else:
            with self._io:
                self._mark_lost(f"{CHECK_TRIES} checks in a row took longer than the {self.lease_s:g}s lease; "
                                "another daemon may take over meanwhile")
        raise LeadershipLost(f"this daemon lost the fleet's {self.kind} lock ({self._lost or 'not held'}); "
                             "another daemon is active: nothing more is appended or sent from here")

    def hold(self, action: Callable[[], T]) -> T:
        """``action()`` once the fence passes (``LeaseBusy`` and nothing run when it does not). Here the check
        and the action are two steps: a process suspended between them runs the action on resume. The file
        lock closes that gap (``FileLeader.hold``); on PostgreSQL the server fences the commits itself
        (``end_fenced_appends``), so only a request written just as the process stopped can leave."""
        try:
            self.check()
        except LeaseBusy:
            raise
        except LeadershipLost as e:
            raise LeaseBusy(str(e)) from None
        return action()

    def start_heartbeat(self, on_lost: Callable[[str], None]) -> None:
        self._on_lost = on_lost
        self._thread = threading.Thread(target=self._beat_loop, name="leader-heartbeat", daemon=True)
        self._thread.start()

    def _beat_loop(self) -> None:
        while not self._stop.wait(self.beat_s):
            try:
                self._renew()
            except Exception as e:  # noqa: BLE001 - a heartbeat that cannot check has lost
                with self._io:
                    self._mark_lost(f"the heartbeat failed: {type(e).__name__}: {e}"[:300])
            if self._lost is not None:
                return

    def _stop_heartbeat(self) -> None:
        self._stop.set()
        t, self._thread = self._thread, None
        if t is not None and t is not threading.current_thread():
            t.join(5)


# ------------------------------------------------------------------ SQLite: one host


class FileLeader(_Heartbeat):
    """The lease file plus the single-writer flock, in the data directory."""

    kind = "file"

    def __init__(self, data_dir: Path, agent_id: str, *, failover_seconds: float, beat_s: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(failover_seconds, beat_s)
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / LEASE_NAME
        self.agent_id = agent_id
        self.flock = FleetLock(self.data_dir)
        self.token = os.urandom(16).hex()  # whose lease this is (128 random bits)
        self.clock = clock
        self._fd: int | None = None
        self._standby_fd: int | None = None
        self._told_busy = False  # leader.lease_busy logged for the present wait

    # -- the lease file

    @contextlib.contextmanager
    def _lease(self) -> Iterator[int]:
        """The lease file's descriptor under its flock (waits up to 2 s for another reader or writer)."""
        if self._fd is None:
            try:
                self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as e:
                raise LockError(f"cannot open the lease file {self.path}: {e.strerror}; the data directory must "
                                "be writable by the user running fleet-agent") from None
        fd = self._fd
        deadline = time.monotonic() + 2.0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockError(f"the lease file {self.path} stayed locked for 2s") from None
                time.sleep(0.01)
        try:
            yield fd
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    @staticmethod
    def _read(fd: int) -> dict[str, Any] | None:
        raw = os.pread(fd, _LEASE_SIZE, 0).rstrip(b" \n\0")
        try:
            d = json.loads(raw) if raw else None
        except ValueError:
            return None  # a writer killed mid-write: nobody's lease
        return d if isinstance(d, dict) else None

    def _write(self, fd: int, lease: dict[str, Any]) -> None:
        data = json.dumps(lease, sort_keys=True).encode()
        os.pwrite(fd, data.ljust(_LEASE_SIZE - 1) + b"\n", 0)

    def read_lease(self) -> dict[str, Any] | None:
        """The lease as it stands (for ``doctor`` and ``holder``)."""
        if not self.path.exists():
            return None
        with self._lease() as fd:
            return self._read(fd)

    def _wait_as_standby(self) -> None:
        """Say, in a file of its own that this process keeps flocked, that it waits to take the fleet over
        (``status`` lists the live ones; the file of a standby that died is the next one's to remove)."""
        if self._standby_fd is not None:
            return
        for old in self.data_dir.glob(STANDBY_PREFIX + "*"):
            if flocked_by_someone(old) is False:
                with contextlib.suppress(OSError):
                    old.unlink()
        path = self.data_dir / f"{STANDBY_PREFIX}{os.getpid()}"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return  # the list in ``status`` is a courtesy: a standby that cannot write it still waits
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": pglock.hostname(), "since": self.clock()}).encode())
        self._standby_fd = fd

    def _stop_waiting(self) -> None:
        fd, self._standby_fd = self._standby_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                (self.data_dir / f"{STANDBY_PREFIX}{os.getpid()}").unlink()
            os.close(fd)

    def _mine(self, lease: dict[str, Any] | None) -> bool:
        return bool(lease) and lease.get("token") == self.token  # type: ignore[union-attr]

    def _takeable(self, lease: dict[str, Any] | None) -> str | None:
        """Why the lease can be taken now, or None (its holder is alive, or a ``fleet-agent tick`` or
        ``backup`` holds the single-writer lock). A free or released lease, or one whose holder had the
        single-writer lock that the kernel has now released, needs that lock; a holder that is alive but
        has not heartbeated for ``failover_seconds`` (suspended, hung) loses the lease without it."""
        free = lease is None or bool(lease.get("released"))
        if self.flock.held and (free or (lease or {}).get("has_flock")):
            return "free" if free else f"its holder (pid {(lease or {}).get('pid')}) died"
        if free or lease is None:
            return None
        age = self.clock() - float(lease.get("beat") or 0)
        if age > self.failover_seconds:
            return f"its holder (pid {lease.get('pid')}) has not heartbeated for {age:.1f}s"
        return None

    # -- the Leader interface

    def hold(self, action: Callable[[], T]) -> T:
        """``action()`` with the lease file's flock held and the lease found ours under it: a standby writes
        its token only under that flock, so no takeover can happen between the check and the action, and a
        holder suspended before it comes back to find the lease gone (``LeaseBusy``, the action not run).
        A holder suspended *inside* it keeps the fleet until resumed; the action is one COMMIT or one write
        to a socket's buffer, so that window is short."""
        with self._io:
            if self._lost is not None or self._held_at is None:
                raise LeaseBusy(f"this daemon lost the fleet's file lock ({self._lost or 'not held'}); "
                                "another daemon is active: nothing more is appended or sent from here")
            with contextlib.ExitStack() as stack:
                try:
                    fd = stack.enter_context(self._lease())
                except LockError as e:  # held by another process for long: that one may be taking over
                    why = str(e)
                else:
                    lease = self._read(fd)
                    if self._mine(lease):
                        assert lease is not None
                        done = action()
                        # A holder that just acted under the lock is alive: resumed from a suspension inside
                        # this block (no standby could take over meanwhile), it keeps the fleet.
                        lease["beat"] = self.clock()
                        self._write(fd, lease)
                        return done
                    holder = f"pid {lease.get('pid')} on {lease.get('host')}" if lease else "nobody"
                    why = f"the lease in {self.path} is now held by {holder}"
            self._mark_lost(why)
        raise LeaseBusy(f"this daemon lost the fleet's file lock ({why}); another daemon is active: nothing "
                        "more is appended or sent from here")

    def try_acquire(self) -> bool:
        if self.held:
            return True
        if self._lost is not None:
            return False
        if not self.flock.held:
            with contextlib.suppress(LockError):
                self.flock.acquire()
        with contextlib.ExitStack() as stack:
            try:
                fd = stack.enter_context(self._lease())
            except LockError:  # the active holds it (inside ``hold``, or suspended there): not takeable now
                if not self._told_busy:
                    self._told_busy = True
                    log.warning("leader.lease_busy", lease=str(self.path),
                                why="another process holds the lease file's lock (the active daemon inside a "
                                "commit or a request's write, or suspended there); waiting for it to let go")
                self._wait_as_standby()
                return False
            self._told_busy = False
            lease = self._read(fd)
            why = self._takeable(lease)
            if why is None:
                if self.flock.held and not (lease or {}).get("has_flock"):
                    self.flock.release()  # the active took over without it; let it have it back
                self._wait_as_standby()
                return False
            started = time.monotonic()  # before the lease is written: its beat is no older than this
            now = self.clock()
            self._write(fd, {"token": self.token, "pid": os.getpid(), "host": pglock.hostname(),
                             "agent_id": self.agent_id, "since": now, "beat": now, "has_flock": self.flock.held,
                             "epoch": int((lease or {}).get("epoch") or 0) + 1})
            self._held_at = self.acquired_at = started
            self.took_because = why
        self._stop_waiting()
        return True

    def _verify(self) -> str | None:
        if not self.flock.held:
            with contextlib.suppress(LockError):
                self.flock.acquire()
        with self._lease() as fd:
            lease = self._read(fd)
            if not self._mine(lease):
                holder = f"pid {lease.get('pid')} on {lease.get('host')}" if lease else "nobody"
                return f"the lease in {self.path} is now held by {holder}"
            assert lease is not None
            lease["beat"] = self.clock()
            lease["has_flock"] = self.flock.held
            self._write(fd, lease)
        return None

    def release(self) -> None:
        self._stop_heartbeat()
        self._stop_waiting()
        try:
            if self._held_at is not None and self._lost is None:
                with self._lease() as fd:
                    lease = self._read(fd)
                    if self._mine(lease):
                        assert lease is not None
                        lease["released"] = True
                        self._write(fd, lease)
        except (LockError, OSError) as e:
            log.warning("leader.release_failed", error=str(e)[:200])
        finally:
            self._held_at = None
            self.flock.release()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def holder(self) -> str:
        try:
            lease = self.read_lease()
        except LockError as e:
            return str(e)
        if lease is None or lease.get("released"):
            flock = self.flock.holder()
            return "nobody" if flock == "unknown" else flock
        age = self.clock() - float(lease.get("beat") or 0)
        return f"pid {lease.get('pid')} on {lease.get('host')}, heartbeat {age:.1f}s ago"


def flocked_by_someone(path: Path) -> bool | None:
    """Whether another process holds ``path``'s flock (None: no such file, or it cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)
    return False


def file_standbys(data_dir: Path) -> list[dict[str, Any]]:
    """The standbys waiting for a fleet's file lock: pid, host and since (Unix time), oldest first."""
    out = []
    for path in Path(data_dir).glob(STANDBY_PREFIX + "*"):
        if flocked_by_someone(path) is not True:
            continue  # a standby that died: the kernel let go of its flock
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(info, dict):
            out.append({"pid": info.get("pid"), "host": info.get("host"), "since": info.get("since")})
    return sorted(out, key=lambda x: (float(x.get("since") or 0), str(x.get("pid"))))


# ------------------------------------------------------------------ PostgreSQL: several hosts


class PgLeader(_Heartbeat):
    """The fleet's leadership table lock, held by a session of its own."""

    kind = "postgresql"

    def __init__(self, conninfo: str, agent_id: str, *, failover_seconds: float, beat_s: float | None = None,
                 connect_kwargs: dict[str, Any] | None = None, monotonic: Callable[[], float] = time.monotonic) -> None:
        super().__init__(failover_seconds, beat_s)
        self.outage = _OutageLog(clock=monotonic)
        self.conninfo = conninfo
        self.agent_id = agent_id
        self.connect_kwargs = dict(connect_kwargs or {})
        self.application_name = identity(agent_id)
        self.idle_timeout_s = max(1.0, self.failover_seconds / 2)
        self._conn: Any = None
        self._saw_holder = False  # a poll found the lock taken: taking it later means its holder went

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = pglock.open_lock_session(self.conninfo, application_name=self.application_name,
                                                  idle_timeout_s=self.idle_timeout_s,
                                                  connect_timeout_s=min(10.0, self.idle_timeout_s),
                                                  **self.connect_kwargs)
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def try_acquire(self) -> bool:
        import psycopg

        if self.held:
            return True
        if self._lost is not None:
            return False
        with self._io:
            try:
                conn = self._connection()
                started = time.monotonic()  # the answer vouches for this moment, however late it is read
                got = pglock.try_lock(conn, self.agent_id)
            except psycopg.Error as e:
                error = str(e).strip()[:200]
                self.unreachable = (f"cannot reach the fleet's PostgreSQL database to take its lock ({error}); "
                                    "check that the server runs and that storage.url names it")
                self.outage.failed(error)
                self._drop()  # a standby's session may have been ended too: the next poll reconnects
                return False
            self.unreachable = None
            self.outage.recovered()
            if got:
                self._held_at = self.acquired_at = started
                self.took_because = ("its holder's session ended (it stopped, died or lost its connection)"
                                     if self._saw_holder else "free")
                self._end_fenced_appends(conn)
            self._saw_holder = self._saw_holder or not got
        return got

    def _end_fenced_appends(self, conn: Any) -> None:
        """An earlier active suspended inside an append would keep the fleet's append lock: end its session."""
        import psycopg

        try:
            ended = pglock.end_fenced_appends(conn, self.agent_id, self.application_name)
        except psycopg.Error as e:  # the first append waits for the lock as before; the next check says more
            log.warning("leader.fence_query_failed", error=str(e).strip()[:200])
            return
        for h in ended:
            log.warning("leader.ended_fenced_session", pid=h.pid, holder=h.application_name,
                        why="an earlier active of this fleet still held the append lock")

    def _verify(self) -> str | None:
        import psycopg

        try:
            if self._conn is None or not pglock.holds_lock(self._conn, self.agent_id):
                return "the lock session no longer holds the fleet's leadership lock"
        except psycopg.Error as e:
            self._drop()
            return f"the lock session is gone ({str(e).strip()[:200]})"
        return None

    def release(self) -> None:
        import psycopg

        self._stop_heartbeat()
        with self._io:
            if self._conn is not None and self._held_at is not None and self._lost is None:
                with contextlib.suppress(psycopg.Error):
                    pglock.unlock(self._conn, self.agent_id)
            self._held_at = None
            self._drop()

    def holders(self) -> list[Any]:
        """The sessions holding the fleet's key, read on a short connection of its own."""
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=10, **self.connect_kwargs) as conn:
            return list(pglock.lock_holders(conn, self.agent_id))

    def daemons(self) -> tuple[list[Any], list[Any]]:
        """The fleet's daemons as the server sees them, on a short connection of its own: the sessions
        holding the fleet's lock, and the other daemons' sessions (standbys, each named as ``identity``
        names it, once per daemon)."""
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=10, **self.connect_kwargs) as conn:
            holders = list(pglock.lock_holders(conn, self.agent_id))
            named = {h.application_name for h in holders}
            others: dict[str, Any] = {}
            for sess in pglock.daemon_sessions(conn, self.agent_id):
                if sess.application_name not in named:
                    others.setdefault(sess.application_name, sess)
        return holders, list(others.values())

    def holder(self) -> str:
        import psycopg

        try:
            found = self.holders()
        except psycopg.Error as e:
            return f"unknown (cannot ask the server: {str(e).strip()[:200]})"
        if not found:
            return "nobody"
        h = found[0]
        return f"server pid {h.pid}, '{h.application_name}'" + (f" from {h.client}" if h.client else "")


# ------------------------------------------------------------------ choosing


def leader_for(settings: Any, env: Mapping[str, str] | None = None) -> FileLeader | PgLeader:
    """The leadership lock for ``settings``' storage: the leadership table lock in the PostgreSQL database
    ``storage.url`` names (with the role's password from ``storage.password_*``), else the file lock in
    ``data_dir``."""
    failover = float(settings.storage.failover_seconds)
    if settings.storage.is_pg:
        target = settings.log_target(env)
        kw = {"password": target.password.reveal()} if target.password is not None else {}
        return PgLeader(target.url, settings.agent_id, failover_seconds=failover, connect_kwargs=kw)
    return FileLeader(settings.data_path, settings.agent_id, failover_seconds=failover)
