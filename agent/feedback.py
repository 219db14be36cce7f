"""The operator's side of the conversation: alerts, knowledge files, notes and directives.

Everything here only appends to the event log (each change in one ``BEGIN
IMMEDIATE`` transaction, check and append together), so the operator CLI can
use it while the daemon runs; the read models (``alerts``, ``directives``,
``knowledge``) follow from the events.

Alerts are deduplicated by a stable key: while an alert for a key is live, a
new sighting appends ``alert.repeated`` (count + 1) instead of a new alert.
An alert is live while it is open, and also after an operator acked it until
its condition clears (``alert.resolved``): an ack silences a condition, it
does not re-arm it. Keys raised by code:

    stuck:<instance id>     one of ours not running for longer than alerts.stuck_after
    dead:<instance id>      one of ours exited / offline / unknown, or its container failed to start
    balance:low             balance under alerts.low_balance
    ticks:failing           alerts.failed_ticks ticks failed in a row
    policy:blocks           alerts.policy_blocks tool calls blocked by policy in one tick
    model:unreachable       raised and resolved by the tick around the model call
    knowledge:bad:<name>    a knowledge file that cannot be used (binary, too large, symlink out)

Knowledge files (``*.md``, ``*.txt``, ``*.yaml``, ``*.yml`` directly in the
knowledge directory) are compared by sha256 with their latest logged version at
every tick start; each change becomes a ``knowledge.changed`` event carrying the
diff and the full new text, so the log alone can say what the agent knew.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import re
import shlex
import signal
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml

from agent.errors import FleetAgentError, UsageError
from agent.events import Event
from agent.store.log import EventLog, Transaction
from agent.store.queries import Alert, FailedRun, KnowledgeVersion

logger = structlog.get_logger(__name__)

SEVERITIES = ("info", "warning", "critical")
KNOWLEDGE_SUFFIXES = (".md", ".txt", ".yaml", ".yml")
MAX_KNOWLEDGE_BYTES = 1024 * 1024
MAX_NOTE_CHARS = 4000

KEY_STUCK = "stuck:"
KEY_DEAD = "dead:"
KEY_BALANCE = "balance:low"
KEY_TICKS = "ticks:failing"
KEY_POLICY = "policy:blocks"
KEY_MODEL = "model:unreachable"
KEY_KNOWLEDGE_BAD = "knowledge:bad:"

DEAD_STATUSES = ("exited", "offline", "unknown")
OCI_FAILURE = "OCI runtime create failed"

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,120}$")
_SOURCE_OF = {"model": "tool", "operator": "operator"}


# ====================================================================== alerts


def _live(tx: Transaction, *, key: str | None = None, prefix: str | None = None) -> list[Alert]:
    """Live alerts (open, or acked while their condition persists) by exact key or key prefix."""
    return tx.store.live_alerts(key=key, prefix=prefix)


def _raise_tx(tx: Transaction, *, key: str, severity: str, title: str, detail: str, raised_by: str,
              tick: int | None) -> tuple[int, Event | None]:
    """Inside a transaction: repeat the live alert for ``key``, or raise a new one (returned)."""
    if severity not in SEVERITIES:
        raise FleetAgentError(f"alert severity {severity!r} is not one of {', '.join(SEVERITIES)}")
    if not key or not key.strip():
        raise FleetAgentError("an alert needs a non-empty dedup key")
    if not title or not title.strip():
        raise FleetAgentError(f"alert {key!r} needs a non-empty title")
    live = _live(tx, key=key)
    source = _SOURCE_OF.get(raised_by, "system")
    if live:
        a = live[-1]
        tx.append("alert.repeated", {"alert_id": a.id, "count": a.count + 1}, source, tick)
        return a.id, None
    new_id = tx.store.next_alert_id()
    payload: dict[str, Any] = {"alert_id": new_id, "severity": severity, "title": title.strip(),
                               "dedup_key": key, "raised_by": raised_by}
    if detail:
        payload["detail"] = detail
    return new_id, tx.append("alert.raised", payload, source, tick)


def _resolve_tx(tx: Transaction, a: Alert, reason: str, tick: int | None) -> Event:
    return tx.append("alert.resolved", {"alert_id": a.id, "title": a.title, "reason": reason}, "system", tick)


def _resolve_absent_tx(tx: Transaction, prefix: str, still_present: set[str], reason: str,
                       tick: int | None) -> list[int]:
    done = []
    for a in _live(tx, prefix=prefix):
        if a.dedup_key not in still_present:
            _resolve_tx(tx, a, reason, tick)
            done.append(a.id)
    return done


def raise_alert(log: EventLog, *, key: str, severity: str, title: str, detail: str = "",
                raised_by: str = "system", tick: int | None = None, settings: Any = None) -> tuple[int, bool]:
    """Raise the alert ``key``, or count another sighting of it if it is live.

    Returns (alert id, True when a new alert was opened). A new alert runs
    ``settings.alerts.notify_command`` (when set) after the event committed.
    """
    with log.transaction() as tx:
        alert_id, event = _raise_tx(tx, key=key, severity=severity, title=title, detail=detail,
                                    raised_by=raised_by, tick=tick)
    if event is not None and settings is not None:
        notify(settings, event)
    return alert_id, event is not None


def resolve_alert(log: EventLog, key: str, reason: str, tick: int | None = None) -> bool:
    """Resolve the live alert with ``key``; False when there is none."""
    with log.transaction() as tx:
        live = _live(tx, key=key)
        for a in live:
            _resolve_tx(tx, a, reason, tick)
    return bool(live)


def resolve_absent(log: EventLog, prefix: str, still_present: set[str], tick: int | None = None,
                   reason: str = "condition cleared") -> list[int]:
    """Resolve live alerts whose key starts with ``prefix`` and is not in ``still_present``."""
    with log.transaction() as tx:
        return _resolve_absent_tx(tx, prefix, still_present, reason, tick)


def ack(log: EventLog, alert_id: int, by: str, note: str | None) -> Event:
    """Acknowledge open alert ``alert_id``; refuses (writing nothing) if it is unknown or not open."""
    by = _who(by)
    note = (note or "").strip() or None
    with log.transaction() as tx:
        a = tx.store.alert(alert_id)
        if a is None:
            raise FleetAgentError(f"no alert #{alert_id}; 'fleet-agent alerts list --all' shows every alert")
        if a.status == "acked":
            raise FleetAgentError(f"alert #{alert_id} was already acked by {a.acked_by}; nothing to do")
        if a.status != "open":
            raise FleetAgentError(f"alert #{alert_id} is {a.status} (its condition cleared); nothing to ack")
        return tx.append("alert.acked", {"alert_id": alert_id, "by": by, "title": a.title, "note": note},
                         "operator")


# ---------------------------------------------------------------------- notify


def notify(settings: Any, event: Event) -> bool:
    """Run ``alerts.notify_command`` with the new alert as JSON on stdin.

    Never raises: a missing command, a non-zero exit or a timeout is logged.
    On timeout the command's whole process group is killed. True when the
    command ran and exited 0.
    """
    cmd = settings.alerts.notify_command
    if not cmd:
        return False
    timeout = float(settings.alerts.notify_timeout)
    body = dict(event.payload)
    body.update({"seq": event.seq, "ts": event.ts, "tick": event.tick,
                 "agent_id": getattr(settings, "agent_id", None)})
    data = (json.dumps(body, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
    alert_id = event.payload.get("alert_id")
    try:
        argv = shlex.split(cmd)
    except ValueError as e:
        logger.warning("alert.notify_failed", alert_id=alert_id, error="bad_command", detail=str(e))
        return False
    if not argv:
        return False
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
                                    start_new_session=True, close_fds=True)
        except OSError as e:
            logger.warning("alert.notify_failed", alert_id=alert_id, command=argv[0], error=type(e).__name__,
                        detail=e.strerror)
            return False
        try:
            proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            logger.warning("alert.notify_timeout", alert_id=alert_id, command=argv[0], timeout_s=timeout,
                        pid=proc.pid)
            return False
        except OSError as e:  # the command exited without reading stdin (EPIPE)
            proc.wait(timeout=timeout) if proc.poll() is None else None
            if proc.returncode is None:
                _kill_group(proc)
            logger.warning("alert.notify_failed", alert_id=alert_id, command=argv[0], error=type(e).__name__)
            return False
        if proc.returncode != 0:
            err.seek(0)
            tail = err.read()[-500:].decode("utf-8", "replace").strip()
            logger.warning("alert.notify_failed", alert_id=alert_id, command=argv[0], status=proc.returncode,
                        stderr=tail)
            return False
    logger.info("alert.notified", alert_id=alert_id, command=argv[0])
    return True


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()


# ---------------------------------------------------------------------- conditions


def _is_dead(i: dict[str, Any]) -> bool:
    return (i.get("status") in DEAD_STATUSES) or OCI_FAILURE in (i.get("status_msg") or "")


def _age_text(s: float) -> str:
    s = int(s)
    return f"{s // 60}m" if s < 3600 else f"{s // 3600}h{(s % 3600) // 60:02d}m"


def trailing_failed_ticks(tx: Transaction, cap: int = 1000) -> FailedRun:
    """How many ticks failed in a row at the end of the log, and the latest reason."""
    return tx.store.consecutive_failed_ticks(cap)


def check_conditions(log: EventLog, settings: Any, observation: dict[str, Any], tick: int) -> None:
    """Raise, repeat or resolve the code-raised alerts for one tick's observation (one transaction)."""
    a = settings.alerts
    new: list[Event] = []

    def up(tx: Transaction, key: str, severity: str, title: str, detail: str = "") -> None:
        _, e = _raise_tx(tx, key=key, severity=severity, title=title, detail=detail, raised_by="system", tick=tick)
        if e is not None:
            new.append(e)

    with log.transaction() as tx:
        stuck: set[str] = set()
        dead: set[str] = set()
        for i in observation.get("instances") or []:
            if not i.get("ours", True):
                continue
            iid = i.get("id")
            where = f"{i.get('gpu_name', '?')} x{i.get('num_gpus', 1)} on host {i.get('host_id', '?')}"
            msg = f"; status message: {i['status_msg']}" if i.get("status_msg") else ""
            if _is_dead(i):
                key = f"{KEY_DEAD}{iid}"
                dead.add(key)
                up(tx, key, "critical", f"instance #{iid} is {i.get('status') or 'failing'}",
                   f"{where}, costing ${i.get('dph', 0):.2f}/h{msg}")
            elif i.get("status") != "running" and float(i.get("age_s") or 0) > float(a.stuck_after):
                key = f"{KEY_STUCK}{iid}"
                stuck.add(key)
                up(tx, key, "warning",
                   f"instance #{iid} stuck in {i.get('status') or 'provisioning'} for "
                   f"{_age_text(float(i.get('age_s') or 0))}", f"{where}{msg}")
        _resolve_absent_tx(tx, KEY_STUCK, stuck, "the instance is running or gone", tick)
        _resolve_absent_tx(tx, KEY_DEAD, dead, "the instance recovered or is gone", tick)

        balance = observation.get("balance")
        if isinstance(balance, int | float):
            if balance < a.low_balance:
                up(tx, KEY_BALANCE, "critical" if balance <= 0 else "warning",
                   f"balance ${balance:,.2f} is below ${a.low_balance:,.2f}",
                   f"fleet spends ${observation.get('fleet_dph', 0.0):,.2f}/h")
            else:
                _resolve_absent_tx(tx, KEY_BALANCE, set(), f"balance back to ${balance:,.2f}", tick)

        if a.failed_ticks > 0:
            run = trailing_failed_ticks(tx, cap=max(a.failed_ticks, 1) * 4 + 100)
            if run.count >= a.failed_ticks:
                up(tx, KEY_TICKS, "critical", f"{run.count} ticks failed in a row",
                   f"latest: {run.latest_reason or '?'}")
            else:
                _resolve_absent_tx(tx, KEY_TICKS, set(), "a tick completed", tick)
    for e in new:
        notify(settings, e)


def note_policy_blocks(log: EventLog, settings: Any, count: int, tick: int | None) -> None:
    """At a tick's end: alert when ``count`` tool calls were blocked by policy, resolve when fewer."""
    threshold = settings.alerts.policy_blocks
    if threshold <= 0:
        return
    if count >= threshold:
        raise_alert(log, key=KEY_POLICY, severity="warning",
                    title=f"{count} tool calls blocked by policy in one tick",
                    detail="the agent keeps asking for what policy forbids; check its instructions and the policy",
                    tick=tick, settings=settings)
    else:
        resolve_alert(log, KEY_POLICY, f"{count} blocked in tick {tick}", tick)


# ====================================================================== knowledge


@dataclass(frozen=True)
class _File:
    name: str
    data: bytes | None
    problem: str | None = None


def valid_knowledge_name(name: str) -> bool:
    return (bool(_NAME.match(name)) and ".." not in name and "/" not in name
            and name.lower().endswith(KNOWLEDGE_SUFFIXES))


def _read_file(path: Path, root: Path) -> _File:
    name = path.name
    if path.is_symlink():
        target = Path(os.path.realpath(path))
        if not target.is_relative_to(root):
            return _File(name, None, "is a symlink pointing outside the knowledge directory; refused")
        if not target.exists():
            return _File(name, None, "is a broken symlink")
    try:
        # O_NONBLOCK: a FIFO named like a knowledge file must not hang the tick in open().
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except IsADirectoryError:
        return _File(name, None, None)
    except OSError as e:
        return _File(name, None, f"cannot be read: {e.strerror}")
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            return _File(name, None, None)
        if not stat.S_ISREG(mode):
            return _File(name, None, "is not a regular file (a pipe, socket or device); refused")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_KNOWLEDGE_BYTES + 1)
    except OSError as e:
        return _File(name, None, f"cannot be read: {e.strerror}")
    finally:
        os.close(fd)
    if len(data) > MAX_KNOWLEDGE_BYTES:
        return _File(name, None, f"is larger than {MAX_KNOWLEDGE_BYTES // 1024} KiB; split it")
    problem = text_problem(data)
    if problem:
        return _File(name, None, problem)
    return _File(name, data)


def text_problem(data: bytes) -> str | None:
    """Why ``data`` is not usable knowledge text, or None."""
    if b"\0" in data:
        return "is binary (contains NUL bytes), not text"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"is not UTF-8 text (bad byte at offset {e.start})"
    return None


def _list_files(kdir: Path) -> dict[str, _File]:
    root = Path(os.path.realpath(kdir))
    out: dict[str, _File] = {}
    try:
        entries = sorted(os.scandir(kdir), key=lambda d: d.name)
    except (FileNotFoundError, NotADirectoryError):
        return out
    for d in entries:
        if d.name.startswith(".") or not d.name.lower().endswith(KNOWLEDGE_SUFFIXES):
            continue
        f = _read_file(Path(d.path), root)
        if f.data is None and f.problem is None:
            continue  # a directory named like a file: not knowledge
        out[d.name] = f
    return out


def _latest_versions(tx_or_log: Transaction | EventLog) -> dict[str, KnowledgeVersion]:
    """name -> each file's newest logged version (its hash is None when it was removed)."""
    return tx_or_log.store.knowledge_latest()


def unified_diff(old: str, new: str, name: str) -> str:
    return "\n".join(difflib.unified_diff(old.splitlines(), new.splitlines(), f"a/{name}", f"b/{name}",
                                          n=2, lineterm=""))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def scan_knowledge(log: EventLog, settings: Any, tick: int | None, *, only: set[str] | None = None) -> list[Event]:
    """Compare the knowledge directory with the log; append one ``knowledge.changed`` per change.

    All changes of one scan commit together. Unusable files are skipped with an
    alert (``knowledge:bad:<name>``) and the agent keeps their last good version;
    a missing directory changes nothing. ``only`` limits the scan to those names.
    """
    kdir = settings.knowledge_path
    if not Path(kdir).is_dir():
        return []
    files = _list_files(kdir)
    if only is not None:
        files = {n: f for n, f in files.items() if n in only}
    changes: list[Event] = []
    new_alerts: list[Event] = []
    with log.transaction() as tx:
        latest = _latest_versions(tx)
        bad: set[str] = set()
        for name, f in files.items():
            if f.data is None:
                key = f"{KEY_KNOWLEDGE_BAD}{name}"
                bad.add(key)
                _, e = _raise_tx(tx, key=key, severity="warning", title=f"knowledge file {name} {f.problem}",
                                 detail="skipped; the agent keeps its last good version. Fix or remove the file.",
                                 raised_by="system", tick=tick)
                if e is not None:
                    new_alerts.append(e)
                continue
            h = _sha(f.data)
            prev = latest.get(name)
            if prev is not None and prev.hash == h:
                continue
            text = f.data.decode("utf-8")
            if prev is None or prev.hash is None:
                payload = {"name": name, "change": "added", "hash": h, "prev_hash": None, "size": len(f.data),
                           "diff": "", "text": text}
            else:
                old = tx.store.knowledge_text(name) or ""
                payload = {"name": name, "change": "changed", "hash": h, "prev_hash": prev.hash,
                           "size": len(f.data), "diff": unified_diff(old, text, name), "text": text}
            changes.append(tx.append("knowledge.changed", payload, "operator", tick))
        for name, k in sorted(latest.items()):
            if k.hash is None or name in files or (only is not None and name not in only):
                continue
            changes.append(tx.append("knowledge.changed", {"name": name, "change": "removed", "hash": None,
                                                           "prev_hash": k.hash, "size": 0, "diff": "",
                                                           "text": None},
                                     "operator", tick))
        for a in _live(tx, prefix=KEY_KNOWLEDGE_BAD):
            name = a.dedup_key[len(KEY_KNOWLEDGE_BAD):]
            if a.dedup_key not in bad and (only is None or name in only):
                _resolve_tx(tx, a, "the file is usable again or gone", tick)
    for e in changes:
        logger.info("knowledge.changed", name=e.payload["name"], change=e.payload["change"],
                    size=e.payload["size"], seq=e.seq)
    for e in new_alerts:
        notify(settings, e)
    return changes


def read_knowledge(log: EventLog, name: str) -> str | None:
    """The latest full text of knowledge file ``name`` as the log holds it (None: unknown or removed)."""
    return log.store.knowledge_text(name)


def knowledge_history(log: EventLog, name: str) -> list[dict[str, Any]]:
    """Every logged version of ``name``, oldest first."""
    return [{"version": k.version, "ts": k.ts, "change": k.change, "size": k.size, "hash": k.hash,
             "seq": k.seq} for k in log.store.knowledge_versions(name)]


@dataclass(frozen=True)
class KnowledgeEntry:
    name: str
    state: str  # current | pending | new | removed | bad
    size: int | None
    version: int | None
    problem: str | None = None


def knowledge_status(log: EventLog, settings: Any) -> list[KnowledgeEntry]:
    """Each knowledge file on disk or in the log, and whether the agent has its current text."""
    files = _list_files(settings.knowledge_path)
    latest = _latest_versions(log)
    out = []
    for name in sorted(set(files) | set(latest)):
        f = files.get(name)
        k = latest.get(name)
        h, version = (k.hash, k.version) if k is not None else (None, None)
        if f is None:
            if h is not None:
                out.append(KnowledgeEntry(name, "pending", None, version, "deleted on disk; next tick logs it"))
            else:
                out.append(KnowledgeEntry(name, "removed", None, version))
        elif f.data is None:
            out.append(KnowledgeEntry(name, "bad", None, version, f.problem))
        elif h is None:
            out.append(KnowledgeEntry(name, "new", len(f.data), version, "the next tick logs it"))
        elif _sha(f.data) != h:
            out.append(KnowledgeEntry(name, "pending", len(f.data), version, "changed on disk; next tick logs it"))
        else:
            out.append(KnowledgeEntry(name, "current", len(f.data), version))
    return out


# ---------------------------------------------------------------------- editing


@dataclass(frozen=True)
class EditResult:
    name: str
    path: Path
    status: str  # created | changed | unchanged
    events: list[Event] = field(default_factory=list)


def _yaml_problem(text: str) -> str | None:
    try:
        for _ in yaml.safe_load_all(text):
            pass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}" if mark else "an unknown line"
        return f"not valid YAML at {where}: {e.problem or e.context}"
    except yaml.YAMLError as e:
        return f"not valid YAML: {e}"
    return None


def _atomic_write(path: Path, data: bytes) -> None:
    mode = (path.stat().st_mode & 0o777) if path.exists() else None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o644 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def knowledge_edit(settings: Any, log: EventLog, name: str, editor_cmd: str | None = None) -> EditResult:
    """Edit knowledge file ``name`` in an editor; save it atomically if it is valid.

    The editor works on a copy. A YAML file that no longer parses, binary text
    or an oversized file is refused (the saved version stays; the edited copy is
    kept and named in the error). A saved change is logged at once.
    """
    if not valid_knowledge_name(name):
        raise UsageError(f"{name!r} is not a knowledge file name: use a plain name ending in "
                         f"{', '.join(KNOWLEDGE_SUFFIXES)} (no '/' or '..')")
    kdir = Path(settings.knowledge_path)
    kdir.mkdir(parents=True, exist_ok=True)
    target = kdir / name
    if target.is_symlink():
        raise FleetAgentError(f"{target} is a symlink; edit the file it points to instead")
    if target.exists() and not target.is_file():
        raise FleetAgentError(f"{target} is not a regular file")
    old = target.read_bytes() if target.exists() else None
    editor = editor_cmd or os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        argv = shlex.split(editor)
    except ValueError as e:
        raise FleetAgentError(f"editor command {editor!r} cannot be parsed: {e}") from None
    work = Path(tempfile.mkdtemp(prefix="fleet-agent-edit-"))
    copy = work / name
    copy.write_bytes(old or b"")
    try:
        rc = subprocess.run([*argv, str(copy)], check=False).returncode  # noqa: S603 - the operator's editor
    except OSError as e:
        _cleanup(work)
        raise FleetAgentError(f"cannot run the editor {argv[0]!r}: {e.strerror}; set $EDITOR") from None
    if rc != 0:
        raise FleetAgentError(f"the editor exited with status {rc}; {name} is unchanged "
                              f"(your copy is kept at {copy})")
    new = copy.read_bytes()
    if new == (old or b"") and (old is not None or not new):
        _cleanup(work)
        return EditResult(name, target, "unchanged")
    problem = text_problem(new)
    if problem is None and len(new) > MAX_KNOWLEDGE_BYTES:
        problem = f"is larger than {MAX_KNOWLEDGE_BYTES // 1024} KiB"
    if problem is None and name.lower().endswith((".yaml", ".yml")):
        problem = _yaml_problem(new.decode("utf-8"))
    if problem is not None:
        raise FleetAgentError(f"{name}: {problem}; refused, the saved version is unchanged "
                              f"(your edit is kept at {copy})")
    _atomic_write(target, new)
    _cleanup(work)
    events = scan_knowledge(log, settings, None, only={name})
    logger.info("knowledge.edited", name=name, size=len(new), created=old is None)
    return EditResult(name, target, "created" if old is None else "changed", events)


def _cleanup(work: Path) -> None:
    for p in work.iterdir():
        with contextlib.suppress(OSError):
            p.unlink()
    with contextlib.suppress(OSError):
        work.rmdir()


# ====================================================================== notes and directives


def _who(by: str) -> str:
    by = (by or "").strip()
    if not by:
        raise FleetAgentError("say who you are: --by NAME must not be empty")
    return by


def say(log: EventLog, text: str, by: str, pin: bool = False) -> Event:
    """Append an operator note (``pin``: a standing directive, id = its seq)."""
    text = (text or "").strip()
    if not text:
        raise FleetAgentError("the note is empty; say what the agent should know")
    if len(text) > MAX_NOTE_CHARS:
        raise FleetAgentError(f"the note is {len(text)} characters; the limit is {MAX_NOTE_CHARS} "
                              "(put long material in a knowledge file)")
    payload: dict[str, Any] = {"text": text, "by": _who(by)}
    if pin:
        payload["pin"] = True
    return log.append("operator.note", payload, "operator")


def unpin(log: EventLog, directive_id: int, by: str) -> Event:
    """Withdraw active directive ``directive_id``; refuses (writing nothing) otherwise."""
    by = _who(by)
    with log.transaction() as tx:
        d = tx.store.directive(directive_id)
        if d is None:
            raise FleetAgentError(f"no directive #{directive_id}; 'fleet-agent directives' lists the active ones")
        if not d.active:
            raise FleetAgentError(f"directive #{directive_id} was already withdrawn")
        return tx.append("directive.unpinned", {"directive_id": directive_id, "by": by}, "operator")


def directives(log: EventLog) -> list[dict[str, Any]]:
    """The active directives, oldest first."""
    return [{"id": d.id, "text": d.text, "by": d.by, "ts": d.ts} for d in log.store.active_directives()]
