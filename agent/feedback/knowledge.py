"""Knowledge files: the operator's plain-text notes the agent reads.

Files (``*.md``, ``*.txt``, ``*.yaml``, ``*.yml`` directly in the knowledge directory) are compared by
sha256 with their latest logged version at every tick start; each change becomes a ``knowledge.changed``
event carrying the diff and the full new text, so the log alone can say what the agent knew.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent import logsetup
from agent.events import Event
from agent.feedback.alerts import dispatch_notifications, live_alerts, raise_in, resolve_in
from agent.store.log import EventLog, Transaction
from agent.store.queries import KnowledgeVersion

logger = logsetup.get_logger(__name__)
KNOWLEDGE_SUFFIXES = (".md", ".txt", ".yaml", ".yml")
MAX_KNOWLEDGE_BYTES = 1024 * 1024
KEY_KNOWLEDGE_BAD = "knowledge:bad:"
# ``knowledge.changed``'s ``by`` for a change the scan found (an edit outside ``knowledge edit``).
EDITED_ON_DISK = "edited on disk"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,120}$")

@dataclass(frozen=True)
class _File:
    name: str
    data: bytes | None
    problem: str | None = None
    hash: str | None = None     # sha256 of the text: read now, or remembered for an unchanged stat


Reader = Callable[[Path, Path, "Counter[tuple[int, int]] | None"], _File]  # (path, root, links inside)
StatKey = tuple[int, int, int, int]   # (size, mtime_ns, inode, links): a new hard link re-reads the file
StatMemo = dict[str, tuple[StatKey, str]]
"""name -> the stat and sha256 of its last good read; a scan re-reads only files whose stat moved."""
RACY_NS = 2_000_000_000   # a file modified this recently may change again within its mtime: not remembered


def valid_knowledge_name(name: str) -> bool:
    return (bool(_NAME.match(name)) and ".." not in name and "/" not in name
            and name.lower().endswith(KNOWLEDGE_SUFFIXES))


def _read_file(path: Path, root: Path, links_inside: Counter[tuple[int, int]] | None = None) -> _File:
    """The file's bytes, or why it is refused. ``links_inside``: how many names each (device, inode)
    has in the directory; a file with more links than that is also reachable from outside it."""
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
        st = os.fstat(fd)
        if links_inside is not None and st.st_nlink > links_inside[(st.st_dev, st.st_ino)]:
            return _File(name, None, "is a hard link to a file outside the knowledge directory; refused "
                         "(copy the text into a file of its own)")
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


def _inodes(entries: list[os.DirEntry[str]]) -> Counter[tuple[int, int]]:
    """(device, inode) -> how many names in the directory point at it."""
    links: Counter[tuple[int, int]] = Counter()
    for d in entries:
        with contextlib.suppress(OSError):
            st = d.stat(follow_symlinks=False)
            links[(st.st_dev, st.st_ino)] += 1
    return links


def _stat_key(d: os.DirEntry[str]) -> StatKey | None:
    """(size, mtime_ns, inode, links) of a regular, non-symlink entry settled for a while; None otherwise."""
    try:
        if d.is_symlink():
            return None
        st = d.stat(follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or time.time_ns() - st.st_mtime_ns < RACY_NS:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_nlink)


def _list_files(kdir: Path, memo: StatMemo | None = None, read: Reader | None = None) -> dict[str, _File]:
    """Every knowledge file, read (through ``read``) unless ``memo`` holds its unchanged stat:
    then only its remembered hash, and a scan costs O(changed files)."""
    read = read or _read_file
    root = Path(os.path.realpath(kdir))
    out: dict[str, _File] = {}
    try:
        entries = sorted(os.scandir(kdir), key=lambda d: d.name)
    except (FileNotFoundError, NotADirectoryError):
        return out
    links = _inodes(entries)
    for d in entries:
        if d.name.startswith(".") or not d.name.lower().endswith(KNOWLEDGE_SUFFIXES):
            continue
        key = _stat_key(d) if memo is not None else None
        hit = memo.get(d.name) if memo is not None else None
        if key is not None and hit is not None and hit[0] == key:
            out[d.name] = _File(d.name, None, None, hit[1])
            continue
        f = read(Path(d.path), root, links)
        if f.data is None and f.problem is None:
            continue  # a directory named like a file: not knowledge
        if f.data is not None:
            f = _File(f.name, f.data, None, sha256_hex(f.data))
        if memo is not None:
            if key is not None and f.hash is not None:
                memo[d.name] = (key, f.hash)
            else:
                memo.pop(d.name, None)
        out[d.name] = f
    if memo is not None:
        for name in set(memo) - set(out):
            del memo[name]
    return out


def _logged(f: _File, prev: KnowledgeVersion | None) -> bool:
    """Whether ``f``'s remembered hash is the version the log already holds (no read needed)."""
    return f.hash is not None and prev is not None and prev.hash == f.hash


def _text_of(f: _File, kdir: Path, read: Reader | None) -> _File:
    """``f`` with its data, read now when only its remembered hash was known."""
    if f.data is not None or f.hash is None:
        return f
    g = (read or _read_file)(Path(kdir) / f.name, Path(os.path.realpath(kdir)), None)
    return _File(g.name, g.data, g.problem, sha256_hex(g.data) if g.data is not None else None)


def _latest_versions(tx_or_log: Transaction | EventLog) -> dict[str, KnowledgeVersion]:
    """name -> each file's newest logged version (its hash is None when it was removed)."""
    return tx_or_log.store.knowledge_latest()


def unified_diff(old: str, new: str, name: str) -> str:
    import difflib  # only when a knowledge file changed

    return "\n".join(difflib.unified_diff(old.splitlines(), new.splitlines(), f"a/{name}", f"b/{name}",
                                          n=2, lineterm=""))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


MEMO_NAME = "knowledge-stat.json"


def save_memo(data_path: Path, memo: StatMemo) -> None:
    """Write the scanner's stat memo beside the database (atomically), so other processes (``status``) can
    tell what changed on disk since the last scan without reading a file. A cache: the log stays the truth."""
    path = Path(data_path) / MEMO_NAME
    tmp = path.with_suffix(".tmp")
    text = json.dumps({n: [list(k), h] for n, (k, h) in sorted(memo.items())})
    try:
        if _holds(path, text):  # most ticks change nothing: no write, no rename
            return
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        logger.warning("knowledge.memo_unsaved", path=str(path), error=e.strerror)


def _holds(path: Path, text: str) -> bool:
    """Whether the file at ``path`` holds exactly ``text`` (False when it cannot be read)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(len(text) + 1) == text
    except (OSError, ValueError):
        return False


def load_memo(data_path: Path) -> StatMemo:
    """The stat memo ``save_memo`` wrote ({} when there is none or it is unreadable)."""
    try:
        raw = json.loads((Path(data_path) / MEMO_NAME).read_text(encoding="utf-8"))
        return {str(n): (tuple(int(x) for x in k), str(h)) for n, (k, h) in raw.items()}  # type: ignore[misc]
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


@dataclass(frozen=True)
class DiskState:
    """The knowledge directory against the log, from stat calls alone (no file is read)."""

    files: int          # knowledge files the log holds (live)
    on_disk: int
    new: list[str]      # on disk, not in the log
    removed: list[str]  # in the log, not on disk
    changed: list[str]  # on disk with a stat that moved since the last scan (or another size than logged)


def disk_state(log: EventLog, kdir: Path, memo: StatMemo) -> DiskState:
    """What the next scan will log, judged by stat: a file whose (size, mtime, inode, links) is the one the
    scanner remembered with the hash the log holds is unchanged; with no memo entry, a size other than the
    logged one counts as changed. Costs one stat per file, whatever the number of files."""
    live = {n: k for n, k in knowledge_latest(log).items() if k.hash is not None}
    disk: dict[str, tuple[StatKey | None, int]] = {}
    try:
        entries = list(os.scandir(kdir))
    except OSError:
        entries = []
    for d in entries:
        if d.name.startswith(".") or not d.name.lower().endswith(KNOWLEDGE_SUFFIXES):
            continue
        key = _stat_key(d)
        try:
            size = d.stat(follow_symlinks=False).st_size
        except OSError:
            continue
        disk[d.name] = (key, size)
    changed = []
    for name in sorted(set(disk) & set(live)):
        key, size = disk[name]
        hit = memo.get(name)
        if hit is not None and key is not None:
            moved = hit[0] != key or hit[1] != live[name].hash
        else:
            moved = size != live[name].size
        if moved:
            changed.append(name)
    return DiskState(len(live), len(disk), sorted(set(disk) - set(live)), sorted(set(live) - set(disk)), changed)


def knowledge_latest(log: EventLog) -> dict[str, KnowledgeVersion]:
    return log.store.knowledge_latest()


def knowledge_problems(kdir: Path) -> dict[str, str]:
    """name -> why the scan refuses it, for every knowledge file in ``kdir`` the agent cannot use."""
    return {name: f.problem for name, f in _list_files(kdir).items() if f.problem is not None}


def scan_knowledge(log: EventLog, settings: Any, tick: int | None, *, only: set[str] | None = None,
                   by: str | None = None, memo: StatMemo | None = None, read: Reader | None = None) -> list[Event]:
    """Compare the knowledge directory with the log; append one ``knowledge.changed`` per change.

    ``by`` says who made the changes (``knowledge edit`` passes the operator); a change found
    otherwise is recorded as ``EDITED_ON_DISK``. All changes of one scan commit together. Unusable files are skipped with an
    alert (``knowledge:bad:<name>``) and the agent keeps their last good version;
    a missing directory changes nothing. ``only`` limits the scan to those names.
    With ``memo`` (kept by the caller between scans) a file whose size, mtime and
    inode did not move is not read again; ``read`` reads one file (a test hook).
    """
    kdir = settings.knowledge_path
    if not Path(kdir).is_dir():
        return []
    files = _list_files(kdir, memo, read)
    if only is not None:
        files = {n: f for n, f in files.items() if n in only}
    changes: list[Event] = []
    new_alerts: list[Event] = []
    with log.transaction() as tx:
        latest = _latest_versions(tx)
        bad: set[str] = set()
        moved = {n: f for n, f in files.items() if not _logged(f, latest.get(n))}
        for name, f in moved.items():
            prev = latest.get(name)
            f = _text_of(f, kdir, read)
            if f.data is None:
                key = f"{KEY_KNOWLEDGE_BAD}{name}"
                bad.add(key)
                _, e = raise_in(tx, key=key, severity="warning", title=f"knowledge file {name} {f.problem}",
                                 detail="skipped; the agent keeps its last good version. Fix or remove the file.",
                                 raised_by="system", tick=tick)
                if e is not None:
                    new_alerts.append(e)
                continue
            h = f.hash or sha256_hex(f.data)
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
            payload["by"] = by or EDITED_ON_DISK
            changes.append(tx.append("knowledge.changed", payload, "operator", tick))
        for name, k in sorted(latest.items()):
            if k.hash is None or name in files or (only is not None and name not in only):
                continue
            changes.append(tx.append("knowledge.changed", {"name": name, "change": "removed", "hash": None,
                                                           "prev_hash": k.hash, "size": 0, "diff": "",
                                                           "text": None, "by": by or EDITED_ON_DISK},
                                     "operator", tick))
        new_alerts.extend(_check_size(tx, settings, tick) if changes else [])
        for a in live_alerts(tx, prefix=KEY_KNOWLEDGE_BAD):
            name = a.dedup_key[len(KEY_KNOWLEDGE_BAD):]
            if a.dedup_key not in bad and (only is None or name in only):
                resolve_in(tx, a, "the file is usable again or gone", tick)
    for e in changes:
        logger.info("knowledge.changed", name=e.payload["name"], change=e.payload["change"],
                    size=e.payload["size"], seq=e.seq)
    if new_alerts:
        dispatch_notifications(log, settings, tick=tick)
    return changes


KEY_KNOWLEDGE_SIZE = "knowledge:over_pinned"
CHARS_PER_TOKEN = 4   # a rough estimate, for the alert only: the projection counts real tokens
FILE_HEAD_TOKENS = 12  # the "### name" line and fence around one file's text, roughly


def shown_in_full(sizes: list[int], cap: int, per_file_cap: int) -> int:
    """How many files (sizes in bytes, in the order the pinned block shows them) fit ``cap`` tokens in
    full, each cut at ``per_file_cap``: the alert's estimate of what the agent sees."""
    used = 0
    for n, size in enumerate(sizes):
        used += min(size // CHARS_PER_TOKEN, per_file_cap) + FILE_HEAD_TOKENS
        if used > cap:
            return n
    return len(sizes)


def _check_size(tx: Transaction, settings: Any, tick: int | None) -> list[Event]:
    """Raise once (resolve when it passes) an alert when the knowledge files cannot all be shown in
    the pinned block: how many, how big, what the agent sees instead and how to see the rest."""
    ctx = getattr(settings, "context", None)
    cap = getattr(ctx, "pinned_max_tokens", None)
    if cap is None:
        return []
    live = [k for k in tx.store.knowledge_latest().values() if k.hash is not None]
    tokens = sum(k.size for k in live) // CHARS_PER_TOKEN
    alerts = live_alerts(tx, key=KEY_KNOWLEDGE_SIZE)
    if tokens <= cap:
        for a in alerts:
            resolve_in(tx, a, "the knowledge files fit the pinned block again", tick)
        return []
    if alerts:
        return []
    newest_first = sorted(live, key=lambda k: (-k.seq, k.name))
    shown = shown_in_full([k.size for k in newest_first], cap, int(getattr(ctx, "knowledge_max_tokens", cap)))
    title = (f"knowledge: {len(live):,} files, ~{tokens / 1000:,.0f}k tokens, over pinned_max_tokens {cap:,}; "
             f"showing the {shown:,} most recently changed; the others by name only")
    _, e = raise_in(tx, key=KEY_KNOWLEDGE_SIZE, severity="warning", title=title,
                    detail="`fleet-agent knowledge status` lists every file; the agent reads any of them with "
                    "read_knowledge(name). Merge or remove files, or raise context.pinned_max_tokens.",
                    raised_by="system", tick=tick)
    return [e] if e is not None else []


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
        elif sha256_hex(f.data) != h:
            out.append(KnowledgeEntry(name, "pending", len(f.data), version, "changed on disk; next tick logs it"))
        else:
            out.append(KnowledgeEntry(name, "current", len(f.data), version))
    return out
