"""``spend``: what the fleet spent, from the log's rental history, and what its model costs."""

from __future__ import annotations

import argparse
from typing import Any

from agent.cli import output
from agent.cli.output import line
from agent.cli.status import model_cost_lines
from agent.fleet import spend
from agent.runtime.app import App


def _m(x: Any) -> str:
    return f"${x:,.2f}" if isinstance(x, int | float) else "-"


def cmd_spend(args: argparse.Namespace, app: App) -> int:
    rep = spend.report(app.log, cache=app.settings.data_path / spend.BEFORE_FILE)
    p = app.settings.policy
    rep["budgets"] = {"max_daily_spend": p.max_daily_spend, "max_monthly_spend": p.max_monthly_spend}
    rep["model"] = spend.model_cost(app.log, app.settings)
    if args.json:
        output.out(output.json_text(rep, indent=2, sort_keys=True))
        return 0
    per = rep["periods"]
    day = f" of {_m(p.max_daily_spend)}" if p.max_daily_spend is not None else ""
    mon = f" of {_m(p.max_monthly_spend)}" if p.max_monthly_spend is not None else ""
    output.out(f"spend as of {rep['as_of'][:16].replace('T', ' ')} UTC (from the log: $/h incl. storage, while "
               "the ticks saw it running)")
    output.out(f"  today       {_m(per['today']['spent'])}{day}")
    output.out(f"  this week   {_m(per['week']['spent'])}")
    output.out(f"  this month  {_m(per['month']['spent'])}{mon}")
    output.out(f"  all time    {_m(rep['total'])}; live run rate {_m(rep['run_rate_dph'])}/h")
    for text in model_cost_lines(rep["model"]):
        output.out(text)
    if rep["by_gpu"]:
        output.out("per GPU model:")
        for g, v in rep["by_gpu"].items():
            output.out(f"  {line(g):<16} {v['instances']:>4} instances  {_m(v['month']):>10} this month  "
                       f"{_m(v['spent']):>10} all time")
    if rep["instances"]:
        output.out("per instance:")
        for i in rep["instances"]:
            state = "live" if i["live"] else f"ended {i['end'][:16].replace('T', ' ')}"
            output.out(f"  #{i['instance_id']:<10} {line(i['gpu_name'] or '?'):<14} {_m(i['dph'])}/h "
                       f"{i['hours']:>8.2f} h  {_m(i['spent']):>10}  {state}")
    return 0
