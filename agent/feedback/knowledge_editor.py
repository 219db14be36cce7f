"""``fleet-agent knowledge edit``: open a knowledge file in the operator's editor, refuse YAML that no
longer parses (with its line), write atomically and log the change at once, naming who made it.

Like ``crontab -e`` and ``kubectl edit``, the file's hash is taken when the editor opens and checked
again before saving: if someone changed the file meanwhile, the save is refused and the other change
shown, so neither edit is silently lost.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent import logsetup
from agent.errors import FleetAgentError, UsageError
from agent.events import Event
from agent.feedback.knowledge import (
    KNOWLEDGE_SUFFIXES,
    MAX_KNOWLEDGE_BYTES,
    scan_knowledge,
    sha256_hex,
    text_problem,
    unified_diff,
    valid_knowledge_name,
)
from agent.store.log import EventLog

logger = logsetup.get_logger(__name__)
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


def _current(target: Path) -> bytes | None:
    """The file's bytes now (None when absent); refuses what the scan would refuse as well."""
    if target.is_symlink():
        raise FleetAgentError(f"{target} is a symlink; edit the file it points to instead")
    if not target.exists():
        return None
    if not target.is_file():
        raise FleetAgentError(f"{target} is not a regular file")
    if target.stat().st_nlink > 1:
        raise FleetAgentError(f"{target} is a hard link (the file has other names, possibly outside the "
                              "knowledge directory); refused like a symlink: copy its text into a file of its own")
    return target.read_bytes()


def _refuse_concurrent(name: str, target: Path, old: bytes | None, copy: Path) -> None:
    """Refuse to save when the file changed on disk since the editor opened it; show that change."""
    now = _current(target)
    if (None if now is None else sha256_hex(now)) == (None if old is None else sha256_hex(old)):
        return
    if now is None:
        what = "it was deleted"
    else:
        diff = unified_diff((old or b"").decode("utf-8", "replace"), now.decode("utf-8", "replace"), name)
        what = "their change:\n" + (diff or "(only whitespace or encoding differs)")
    raise FleetAgentError(f"{name} changed on disk while you edited it; your edit was not saved (it is kept at "
                          f"{copy}); merge it with the new version and run 'fleet-agent knowledge edit {name}' "
                          f"again. {what}")


def _check_new(name: str, new: bytes, copy: Path) -> None:
    problem = text_problem(new)
    if problem is None and len(new) > MAX_KNOWLEDGE_BYTES:
        problem = f"is larger than {MAX_KNOWLEDGE_BYTES // 1024} KiB"
    if problem is None and name.lower().endswith((".yaml", ".yml")):
        problem = _yaml_problem(new.decode("utf-8"))
    if problem is not None:
        raise FleetAgentError(f"{name}: {problem}; refused, the saved version is unchanged "
                              f"(your edit is kept at {copy})")


def knowledge_edit(settings: Any, log: EventLog, name: str, editor_cmd: str | None = None,
                   by: str | None = None) -> EditResult:
    """Edit knowledge file ``name`` in an editor; save it atomically if it is valid.

    The editor works on a copy. A YAML file that no longer parses, binary text
    or an oversized file is refused (the saved version stays; the edited copy is
    kept and named in the error), and so is a save over a change someone else
    made meanwhile. A saved change is logged at once, ``by`` the operator.
    """
    if not valid_knowledge_name(name):
        raise UsageError(f"{name!r} is not a knowledge file name: use a plain name ending in "
                         f"{', '.join(KNOWLEDGE_SUFFIXES)} (no '/' or '..')")
    kdir = Path(settings.knowledge_path)
    kdir.mkdir(parents=True, exist_ok=True)
    target = kdir / name
    old = _current(target)
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
    _check_new(name, new, copy)
    _refuse_concurrent(name, target, old, copy)
    _atomic_write(target, new)
    _cleanup(work)
    events = scan_knowledge(log, settings, None, only={name}, by=by)
    logger.info("knowledge.edited", name=name, size=len(new), created=old is None)
    return EditResult(name, target, "created" if old is None else "changed", events)


def _cleanup(work: Path) -> None:
    for p in work.iterdir():
        with contextlib.suppress(OSError):
            p.unlink()
    with contextlib.suppress(OSError):
        work.rmdir()
