"""Service commands: ``run`` (the daemon), ``status`` and ``doctor``."""

from __future__ import annotations

import argparse

from agent.cli import output
from agent.runtime.app import App


def _print(s: str = "") -> None:
    output.out(s)


def cmd_run(args: argparse.Namespace, app: App) -> int:
    # the scheduler and the tick: only for the command that runs them
    from agent.service.daemon import run_daemon

    return run_daemon(app.settings, config_path=app.settings.source_path, env=app.env, hard_exit=True,
                      standby=bool(args.standby))


def cmd_status(args: argparse.Namespace, app: App) -> int:
    from agent.cli.status import format_text
    from agent.runtime.status import collect

    st = collect(app)
    _print(output.json_text(st, indent=2, sort_keys=True, default=str) if args.json else format_text(st))
    return 0


def cmd_doctor(args: argparse.Namespace, _app: App | None) -> int:
    from agent.cli.doctor import format_line, run_checks  # the checks' clients: not for `status`

    results = run_checks(args.config)
    failed = [r for r in results if not r.ok]
    if args.json:
        _print(output.json_text({"ok": not failed, "verdict": "fail" if failed else "ok",
                                 "checked": len(results), "failed": [r.name for r in failed],
                                 "checks": [r.to_dict() for r in results]}, indent=2))
        return 1 if failed else 0
    for r in results:
        _print(format_line(r))
    _print(f"{len(failed)} of {len(results)} checks failed" if failed else f"all {len(results)} checks ok")
    return 1 if failed else 0
