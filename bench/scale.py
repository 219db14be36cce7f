"""How a tick's cost grows with the fleet (10, 100, 500 instances) and with operators writing at once.

Fleet: for each size a fresh simulator market is widened to that many offers (copies of its own), an
instance carrying our label is rented on each and adopted in the log (as reconcile records one of our
rents), then ``--ticks`` ticks run with the scripted model (tests/fakes/openai_server.py, one plain
answer per tick). Prints per size: the observation's size (bytes of the ``tick.started`` payload and
tokens of its rendering), tick wall p50 and the request's estimated tokens, with ratios to the
smallest size in the same run. The account holds enough credit for the run (the simulator stops every
instance when the balance runs out, which is the mass stop below, not a steady fleet).

Mass stop (``--flood N``, default 100; 0 = off): after the steady ticks, vast.ai shows N of the fleet's
instances stopped at once (a host outage, a credit stop) and one more tick runs. The tick destroys each one
(paced by vast.ai's rate limit, as in production) and raises its alert; prints the tick's events, the tokens
its messages would take shown one by one, what the model was sent (the budget folds the flood, see
``context.flood_keep``) or that the step was refused, and the tick's wall time.

Operators: ``--writers`` processes each append ``--notes`` operator notes to one log at once
(``BEGIN IMMEDIATE`` each, synchronous=FULL) while this process appends as a tick would; prints
notes/s over all writers and append latency p50/p99, against one writer alone in the same run.

    python bench/scale.py [--sizes 10,100,500] [--ticks 10] [--flood 100] [--writers 4] [--notes 100]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent import logsetup  # noqa: E402
from agent.events.canonical import canonical  # noqa: E402
from agent.runtime.app import App  # noqa: E402
from agent.runtime.tick import run_tick  # noqa: E402
from agent.sim import ManualClock, SimServer, Simulator  # noqa: E402
from agent.store.log import EventLog  # noqa: E402
from tests.conftest import settings_for  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, reply  # noqa: E402


def _widen(sim: Simulator, n: int) -> list[int]:
    """At least ``n`` unrented offers (copies of the market's own, new ids); their ids."""
    base = sorted(sim.offers.values(), key=lambda o: o["id"])
    next_id = max(sim.offers) + 1
    while sum(1 for o in sim.offers.values() if not o["rented"]) < n:
        o = base[next_id % len(base)]
        sim.offers[next_id] = {**o, "id": next_id, "rented": False}
        next_id += 1
    return [o["id"] for o in sim.offers.values() if not o["rented"]][:n]


def fleet(size: int, ticks: int, root: Path, flood: int = 0) -> dict[str, Any]:
    clock = ManualClock()
    sim = Simulator(seed=7, clock=clock, start_balance=1_000_000.0)
    with SimServer(sim) as server, FakeOpenAI() as fake:
        fake.enqueue(*[reply("fleet steady") for _ in range(ticks + 10)])
        app = App(settings_for(root, server.url, model_url=fake.base_url, policy={"max_instances": size + 10}),
                  env={"VAST_API_KEY": sim.api_key}, clock=clock)
        app.init_database()
        base = app.settings.fleet.label_prefix + app.settings.agent_id + "-"
        for n, oid in enumerate(_widen(sim, size)):
            key = f"{n:012x}"
            iid = sim.create_instance(oid, label=base + key)
            app.log.append("instance.adopted", {"instance_id": iid, "label": base + key, "idem_key": key}, "system")
        sim.advance(900)
        walls, obs_bytes, obs_tokens, req_tokens = [], [], [], []
        tok = app.log.tokenizer
        from agent import events as ev

        for _ in range(ticks):
            t = time.perf_counter()
            r = run_tick(app)
            walls.append((time.perf_counter() - t) * 1e3)
            start = next(app.log.read(0, kinds=["tick.started"], tick=r.tick))
            obs_bytes.append(len(canonical(start.payload).encode()))
            msg = ev.render(start)
            obs_tokens.append(tok.count_message(msg) if msg else 0)
            req = next(app.log.read(0, kinds=["model.request"], tick=r.tick, newest_first=True, limit=1))
            req_tokens.append(int(req.payload["manifest"]["estimated_tokens"]))
            sim.advance(300)
        flooded = _mass_stop(app, sim, min(flood, size)) if flood else None
        app.close()
    return {"instances": size, "observation_bytes": statistics.median(obs_bytes),
            "observation_tokens": statistics.median(obs_tokens), "tick_wall_p50_ms": statistics.median(walls),
            "request_tokens": statistics.median(req_tokens), "flood": flooded}


def _mass_stop(app: App, sim: Simulator, n: int) -> dict[str, Any]:
    """``n`` instances of the fleet stopped at once, then one tick: what it logged and what the model saw."""
    from agent import events as ev

    ours = sorted(i["id"] for i in sim.state()["instances"] if i.get("actual_status") == "running")[:n]
    for iid in ours:
        sim.set_status(iid, "stopped", "host went offline")
    t = time.perf_counter()
    r = run_tick(app)
    wall = time.perf_counter() - t
    events = list(app.log.read(0, tick=r.tick))
    tok = app.log.tokenizer
    one_by_one = sum(tok.count_message(m) for m in (ev.render(e) for e in events) if m)
    req = next(iter(app.log.read(0, kinds=["model.request"], tick=r.tick, limit=1)), None)
    manifest = req.payload["manifest"] if req is not None else {}
    return {"stopped": len(ours), "events": len(events), "one_by_one_tokens": one_by_one,
            "sent_tokens": manifest.get("calibrated_tokens"), "limit": app.settings.context.budget_tokens
            - app.settings.context.output_reserve, "destroyed": sum(1 for e in events if e.kind == "system.destroy"),
            "refused": any(e.kind == "context.step_refused" for e in events), "tick_wall_s": wall}


def _writer(path: str, notes: int, who: str, out: Any) -> None:
    lat = []
    with EventLog(path, create=False) as log:
        for n in range(notes):
            t = time.perf_counter()
            log.append("operator.note", {"text": f"note {n} from {who}", "by": who}, "operator")
            lat.append(time.perf_counter() - t)
    out.put(lat)


def operators(root: Path, writers: int, notes: int) -> dict[str, Any]:
    path = root / "ops.db"
    EventLog(path).close()
    res: dict[str, Any] = {}
    for label, k in (("alone", 1), ("together", writers)):
        q: Any = mp.Queue()
        procs = [mp.Process(target=_writer, args=(str(path), notes, f"op{i}", q)) for i in range(k)]
        t = time.perf_counter()
        for p in procs:
            p.start()
        lat = [x for _ in procs for x in q.get()]
        for p in procs:
            p.join()
        wall = time.perf_counter() - t
        lat.sort()
        res[label] = {"writers": k, "notes_per_s": round(k * notes / wall), "p50_ms": round(lat[len(lat) // 2] * 1e3, 2),
                      "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, 2)}
    with EventLog(path, create=False) as log:
        res["chain_verifies"] = log.verify().ok
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,500")
    ap.add_argument("--ticks", type=int, default=10)
    ap.add_argument("--flood", type=int, default=100, help="instances stopped at once after the steady ticks (0: off)")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--notes", type=int, default=100)
    a = ap.parse_args(argv)
    logsetup.configure("warning", "auto")
    with tempfile.TemporaryDirectory(prefix="fleet-agent-scale-") as d:
        rows = []
        for size in (int(x) for x in a.sizes.split(",")):
            rows.append(fleet(size, a.ticks, Path(d) / f"f{size}", a.flood))
            r, b = rows[-1], rows[0]
            print(f"instances {size:>4}  observation {r['observation_bytes']:>7,.0f} B / {r['observation_tokens']:>6,.0f} tok"
                  f" (x{r['observation_bytes'] / b['observation_bytes']:.1f})  request {r['request_tokens']:>6,.0f} tok"
                  f" (x{r['request_tokens'] / b['request_tokens']:.1f})  tick p50 {r['tick_wall_p50_ms']:7.1f} ms"
                  f" (x{r['tick_wall_p50_ms'] / b['tick_wall_p50_ms']:.1f})", flush=True)
            f = r["flood"]
            if f:
                sent = "REFUSED (the model saw nothing)" if f["refused"] or f["sent_tokens"] is None else \
                    f"model sent {f['sent_tokens']:,} tok (limit {f['limit']:,})"
                print(f"           mass stop of {f['stopped']}: {f['events']:,} events, {f['destroyed']} destroyed, "
                      f"{f['one_by_one_tokens']:,} tok shown one by one; {sent}; tick {f['tick_wall_s']:.1f} s",
                      flush=True)
        print(json.dumps({"operators": operators(Path(d), a.writers, a.notes)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
