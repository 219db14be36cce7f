"""Operator words against a hostile summariser; prints ONE JSON object and a table.

    python bench/faithful.py                 # 1,000 ticks at budgets 8k, 16k and 30k
    python bench/faithful.py --ticks 200 --budgets 8000

Ticks go to a real SQLite log; compaction runs before each tick with a summariser behind the fake
OpenAI-compatible server (real openai SDK over HTTP) that writes skeletons, negations ("no directives were
given"), orders nobody gave, wrong numbers, and summaries citing inputs by number only, in turn
(tests/context/faithful_run.py). After each tick every operator input still in force is looked for verbatim
in the projected request. Figures per budget: inputs given, checks (input x tick), kept, lost, compactions,
summariser attempts rejected, retries, fallbacks, accepted summaries, seconds; and the budget split (system,
pinned, summary, tools, history, output reserve, free) averaged over the ticks' requests.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import structlog  # noqa: E402

from tests.context.faithful_run import run  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=1000)
    ap.add_argument("--budgets", default="8000,16000,30000")
    a = ap.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    rows = []
    with tempfile.TemporaryDirectory() as d, FakeOpenAI() as fake:
        for b in (int(x) for x in a.budgets.split(",")):
            t = time.perf_counter()
            r = run(Path(d) / f"run-{b}.db", fake, budget=b, ticks=a.ticks).row()
            r["seconds"] = round(time.perf_counter() - t, 1)
            rows.append(r)
    print(json.dumps({"ticks": a.ticks, "runs": rows, "aim": "0 operator inputs lost",
                      "met": all(r["lost"] == 0 for r in rows)}))
    cols = ("budget", "inputs", "checks", "kept", "lost", "compactions", "rejected", "retries", "fallbacks", "llm",
            "seconds")
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r[c]) for c in cols))
    print("budget split, % of the budget averaged over the ticks' requests:")
    for r in rows:
        print(f"{r['budget']}: " + " · ".join(f"{k} {v}%" for k, v in r["split_pct"].items()))


if __name__ == "__main__":
    main()
