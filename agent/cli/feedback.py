"""Operator feedback commands: alerts, knowledge files, notes and directives.

Every command here only appends to the event log (or reads it); none takes the
daemon's lock, so they all work while the daemon runs.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from dataclasses import asdict
from typing import Any

from agent import feedback
from agent.cli import output
from agent.cli.output import line
from agent.errors import FleetAgentError, UsageError
from agent.events import render
from agent.feedback.alerts import silenced_by
from agent.runtime.app import App
from agent.times import utc_ts

ADVICE_LINES = 8  # lines of advice ``say`` and ``knowledge edit`` quote back (the rest are counted)


def _print(s: str = "") -> None:
    output.out(s)


def invoking_user() -> str:
    """Who runs this command: the user behind sudo, else the login name."""
    sudo = os.environ.get("SUDO_USER")
    if sudo:
        return sudo
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (containers)
        return "operator"


def _by(args: argparse.Namespace) -> str:
    return args.by if args.by is not None else invoking_user()


# ------------------------------------------------------------------ alerts

def _alerts(app: App, *, all_: bool) -> list[dict[str, Any]]:
    """The alerts as dicts; ``silenced_until`` / ``silence_id`` name a silence in force over it (else null)."""
    silences = app.store.silences(now_ts=utc_ts(app.now()))
    return [_with_silence(a, silenced_by(silences, a) if a.status != "resolved" else None)
            for a in app.store.alerts(all_=all_)]


def _with_silence(a: Any, s: Any) -> dict[str, Any]:
    return {**asdict(a), "silenced_until": s.until_ts if s else None, "silence_id": s.id if s else None}


def _alert_fields(app: App, alert_id: int) -> dict[str, Any] | None:
    """One alert as ``alerts list`` shows it (silence fields included), or None."""
    a = app.log.store.alert(alert_id)
    if a is None:
        return None
    silences = app.log.store.silences(now_ts=utc_ts(app.log.clock()))
    return _with_silence(a, silenced_by(silences, a) if a.status != "resolved" else None)


def cmd_alerts_list(args: argparse.Namespace, app: App) -> int:
    rows = _alerts(app, all_=args.all)
    if args.json:
        _print(output.json_text(rows, indent=2))
        return 0
    if not rows:
        _print("no alerts" if args.all else "no open alerts")
        return 0
    for a in rows:
        seen = f" ×{a['count']}" if a["count"] > 1 else ""
        quiet = f"  (silenced until {a['silenced_until'][11:16]} UTC, #{a['silence_id']})" if a["silence_id"] else ""
        _print(f"#{a['id']:<4} {a['severity']:<8} {a['status']:<8} {a['last_ts'][:16].replace('T', ' ')}"
               f"{seen}  {line(a['title'])}  [{line(a['dedup_key'])}]{quiet}")
    return 0


def _alert_history(app: App, alert_id: int) -> list[dict[str, Any]]:
    out = []
    for seq in app.log.store.alert_history_seqs(alert_id):
        e = app.log.get(seq)
        if e is None:
            continue
        msg = render(e)
        text = msg["content"] if msg else json.dumps(e.payload, sort_keys=True, ensure_ascii=False)
        out.append({"seq": e.seq, "ts": e.ts, "kind": e.kind, "text": text})
    return out


def cmd_alerts_show(args: argparse.Namespace, app: App) -> int:
    alert = _alert_fields(app, args.id)
    if alert is None:
        raise FleetAgentError(f"no alert #{args.id}; 'fleet-agent alerts list --all' shows every alert")
    history = _alert_history(app, args.id)
    if args.json:
        _print(output.json_text({**alert, "history": history}, indent=2))
        return 0
    for k, v in alert.items():
        if v not in (None, ""):
            _print(f"{k:>10}: {line(v)}")
    _print("history:")
    for h in history:
        _print(f"  #{h['seq']} {h['ts'][:19]}Z {h['kind']}: {line(h['text'])}")
    return 0


def cmd_alerts_ack(args: argparse.Namespace, app: App) -> int:
    e = feedback.ack(app.log, args.id, _by(args), args.note)
    if e is None:
        a = app.log.store.alert(args.id)
        _print(f"alert #{args.id} was already acked by {line(a.acked_by if a else '?')}; nothing to do")
        return 0
    _print(f"alert #{args.id} acked by {line(e.payload['by'])} (event #{e.seq})")
    return 0


def cmd_alerts_silence(args: argparse.Namespace, app: App) -> int:
    if (args.id is None) == (args.key is None):
        raise UsageError("alerts silence: give an alert number or --key PATTERN (one of them)")
    e = feedback.silence(app.log, by=_by(args), reason=args.reason, seconds=args.for_, alert_id=args.id,
                         key_pattern=args.key)
    what = f"alert #{args.id}" if args.id is not None else f"alerts with key {line(args.key)}"
    _print(f"silence #{e.seq}: {what} notify nobody until {e.payload['until'][:16].replace('T', ' ')} UTC; "
           f"'fleet-agent alerts unsilence {e.seq}' lifts it")
    return 0


def cmd_alerts_silences(args: argparse.Namespace, app: App) -> int:
    now = utc_ts(app.now())
    rows = []
    for s in app.store.silences(now_ts=None if args.all else now):
        state = "lifted" if s.lifted_seq is not None else "expired" if s.until_ts <= now else "active"
        rows.append({**asdict(s), "state": state})
    if args.json:
        _print(output.json_text(rows, indent=2))
        return 0
    if not rows:
        _print("no silences" if args.all else "no active silences")
    for r in rows:
        what = f"alert #{r['alert_id']}" if r["alert_id"] is not None else f"key {line(r['key_pattern'])}"
        _print(f"#{r['id']:<5} {r['state']:<8} until {r['until_ts'][:16].replace('T', ' ')}  {what}  "
               f"by {line(r['by'])}: {line(r['reason'])}")
    return 0


def cmd_alerts_unsilence(args: argparse.Namespace, app: App) -> int:
    e = feedback.unsilence(app.log, args.id, _by(args))
    _print(f"silence #{args.id} lifted (event #{e.seq})")
    return 0


# ------------------------------------------------------------------ knowledge


def cmd_knowledge_list(args: argparse.Namespace, app: App) -> int:
    entries = feedback.knowledge_status(app.log, app.settings)
    if args.json:
        _print(output.json_text([e.__dict__ for e in entries], indent=2))
        return 0
    if not entries:
        _print(f"no knowledge files in {app.settings.knowledge_path}")
        return 0
    for k in entries:
        size = f"{k.size}B" if k.size is not None else "-"
        version = f"v{k.version}" if k.version is not None else "-"
        note = f"  ({k.problem})" if k.problem else ""
        _print(f"{line(k.name):<32} {k.state:<8} {version:>5} {size:>9}{line(note)}")
    return 0


def cmd_knowledge_show(args: argparse.Namespace, app: App) -> int:
    text = feedback.read_knowledge(app.log, args.name)
    if text is None:
        raise FleetAgentError(f"the log holds no current version of {args.name!r}; "
                              "'fleet-agent knowledge list' shows the files the agent knows")
    if args.json:
        latest = app.log.store.knowledge_latest().get(args.name)
        _print(output.json_text({"name": args.name, "version": latest.version if latest else None,
                                 "hash": latest.hash if latest else None, "seq": latest.seq if latest else None,
                                 "ts": latest.ts if latest else None, "text": text}, indent=2))
        return 0
    _print(text[:-1] if text.endswith("\n") else text)
    return 0


def cmd_knowledge_edit(args: argparse.Namespace, app: App) -> int:
    r = feedback.knowledge_edit(app.settings, app.log, args.name, args.editor, by=_by(args))
    if r.status == "unchanged":
        _print(f"{r.name}: no changes")
    else:
        seqs = ", ".join(f"#{e.seq}" for e in r.events) or "none"
        _print(f"{line(r.name)}: {r.status} ({line(r.path)}); logged as event {seqs}")
        from agent.fleet.constraints import knowledge_words

        for e in r.events:
            report_proposals(app, knowledge_words(e.payload), source="knowledge", source_seq=e.seq,
                             by=_by(args), enforce=False)
    return 0


def cmd_knowledge_history(args: argparse.Namespace, app: App) -> int:
    versions = feedback.knowledge_history(app.log, args.name)
    if args.json:
        _print(output.json_text(versions, indent=2))
        return 0
    if not versions:
        raise FleetAgentError(f"the log has no versions of {args.name!r}; "
                              "'fleet-agent knowledge list' shows the files the agent knows")
    for v in versions:
        h = (v["hash"] or "-")[:12]
        _print(f"v{v['version']:<4} {v['ts'][:19]}Z {v['change']:<8} {v['size']:>9}B {h}  (event #{v['seq']})")
    return 0


# ------------------------------------------------------------------ notes and directives


def _note_text(args: argparse.Namespace) -> str:
    """The note from the arguments, or from standard input for ``say -``."""
    if args.text != ["-"]:
        return " ".join(args.text)
    data = sys.stdin.buffer.read(feedback.MAX_NOTE_CHARS * 4 + 1)
    return feedback.decode_note(data)


def cmd_say(args: argparse.Namespace, app: App) -> int:
    if args.enforce:  # accepting checks each constraint against the policy: refused before the note is appended
        app.require("policy")
    e = feedback.say(app.log, _note_text(args), _by(args), pin=args.pin)
    if args.pin:
        _print(f"directive #{e.seq} pinned; 'fleet-agent unpin {e.seq}' withdraws it")
    else:
        _print(f"note recorded (event #{e.seq}); the agent reads it at its next step")
    refused = report_proposals(app, e.payload["text"], source="directive" if args.pin else "note",
                               source_seq=e.seq, by=e.payload["by"], enforce=args.enforce)
    return 1 if refused else 0


def report_proposals(app: App, text: str, *, source: str, source_seq: int | None, by: str, enforce: bool) -> int:
    """Propose what the operator's words let code enforce, print it at once (accepted too with
    ``enforce``), and say what stays advice. Returns how many ``enforce`` could not accept."""
    from agent.fleet import constraints

    refused = 0
    events, ex = constraints.propose(app.log, text, source=source, source_seq=source_seq, by=by)
    if events:
        _print("enforced now:" if enforce else "proposed constraints (not enforced until accepted):")
        for ev in events:
            _print(f"  #{ev.seq} {line(constraints.describe(ev.payload['constraint'], ev.payload['value'], ev.payload['until']))}")
        ids = " ".join(str(ev.seq) for ev in events)
        if enforce:
            for ev in events:
                try:
                    for p, what in constraints.accept(app.log, app.settings, [ev.seq], by=by):
                        _print(f"  accepted #{p.id}: {line(what)}")
                except UsageError as err:
                    refused += 1
                    sys.stderr.write(line(f"fleet-agent: #{ev.seq} not enforced, it stays proposed: {err}") + "\n")
        else:
            _print(f"accept: fleet-agent policy accept {ids}    reject: fleet-agent policy reject {ids}")
    for problem in ex.problems:
        _print(f"note: {line(problem)}")
    for a in ex.advice[:ADVICE_LINES]:
        _print(f"kept as advice, not a rule: {line(a)}")
    if len(ex.advice) > ADVICE_LINES:
        _print(f"kept as advice, not a rule: {len(ex.advice) - ADVICE_LINES} more lines")
    return refused


def cmd_unpin(args: argparse.Namespace, app: App) -> int:
    e = feedback.unpin(app.log, args.id, _by(args))
    _print(f"directive #{args.id} withdrawn (event #{e.seq})")
    return 0


def cmd_directives(args: argparse.Namespace, app: App) -> int:
    ds = feedback.directives(app)  # the read models alone (App.store): the event log need not load
    if args.json:
        _print(output.json_text(ds, indent=2))
        return 0
    if not ds:
        _print("no active directives")
    for d in ds:
        _print(f"#{d['id']:<5} {d['ts'][:16].replace('T', ' ')} {line(d['by'])}: {line(d['text'])}")
    return 0
