"""Secrets: canary keys must appear nowhere but in the Authorization header.

The vast.ai key comes from the environment, the model key from a systemd credential
file; ticks run through the CLI with API faults, ambiguous rents and model faults (one
of which echoes the key back in its error, as some providers do).
"""

from __future__ import annotations

import json
import os

import pytest

from tests.fakes.openai_server import FakeOpenAI, context_length_error, error, hang, reply
from tests.reliability.harness import chaos_faults, check_db, db_path, running_sim, write_config

VAST_CANARY = "CANARY-VAST-7f3a9c1e5b2d"
MODEL_CANARY = "CANARY-MODEL-2d8e4f6a1c9b"


def canary_hits(blobs: dict[str, bytes]) -> dict[str, int]:
    hits = {}
    for name, data in blobs.items():
        n = sum(data.count(c.encode()) for c in (VAST_CANARY, MODEL_CANARY))
        if n:
            hits[name] = n
    return hits


@pytest.mark.slow
def test_canary_keys_never_leave_the_auth_header_under_every_fault(fast_root, zygote):
    """Ticks and operator commands run as separate CLI processes with every fault kind: the
    canaries are absent from the database, its WAL and head file, `log export`, every
    stdout/stderr (structlog output and any traceback), the model requests' bodies and the
    simulator's request log."""
    creds = fast_root / "creds"
    creds.mkdir()
    (creds / "model_api_key").write_text(MODEL_CANARY + "\n", encoding="utf-8")
    env = {"VAST_API_KEY": VAST_CANARY, "CREDENTIALS_DIRECTORY": str(creds), "OPENAI_API_KEY": ""}
    with FakeOpenAI(api_key=MODEL_CANARY) as fake, running_sim(seed=6, api_key=VAST_CANARY) as (sim, server):
        cfg = write_config(fast_root, server.url, vast_key_file=None, provider="openai", model_url=fake.base_url,
                           model={"timeout": 0.5})
        sim.faults.update(chaos_faults(0.25, ambiguous=0.3, slow=0.03, slow_seconds=0.8))
        sim.pending = 500.0
        echo = {"error": {"message": f"Incorrect API key provided: {MODEL_CANARY}.", "type": "invalid_request_error",
                          "code": "invalid_api_key"}}
        offers = [o["id"] for o in sorted(sim.offers.values(), key=lambda o: o["dph_total"])
                  if o["gpu_name"] in ("RTX 3090", "RTX 4090") and not o["rented"]][:6]
        scripts = [
            [reply("renting", tool_calls=[("rent_instance", {"offer_id": o, "reason": "demand"}) for o in offers[:3]])],
            [error(401, echo)],
            [error(500, {"error": {"message": f"upstream said {MODEL_CANARY}", "type": "server_error"}})],
            [reply(tool_calls=[("search_offers", "{not json")]), reply("ok")],
            [context_length_error(), context_length_error()],
            [hang(2.0)],
            [reply(tool_calls=[("rent_instance", {"offer_id": o, "reason": "more"}) for o in offers[3:]])],
            [reply(tool_calls=[("get_balance", {}), ("list_fleet", {})]), reply("done")],
        ]
        outputs: dict[str, bytes] = {}
        for n, steps in enumerate(scripts):
            fake.enqueue(*steps)
            pid = zygote.spawn(["--config", str(cfg), "tick"], fast_root / "o", fast_root / "e", env=env)
            zygote.wait(pid)
            fake._script.clear()
            outputs[f"tick {n} stdout"] = (fast_root / "o").read_bytes()
            outputs[f"tick {n} stderr"] = (fast_root / "e").read_bytes()
            sim.advance(300.0)
        for argv in (["log", "export"], ["thread", "show", "--json"], ["status", "--json"], ["config", "show"],
                     ["config", "check"], ["alerts", "list", "--all"], ["log", "verify"], ["doctor"]):
            pid = zygote.spawn(["--config", str(cfg), *argv], fast_root / "o", fast_root / "e", env=env)
            zygote.wait(pid)
            outputs[" ".join(argv) + " stdout"] = (fast_root / "o").read_bytes()
            outputs[" ".join(argv) + " stderr"] = (fast_root / "e").read_bytes()
        data = db_path(fast_root).parent
        for f in sorted(os.listdir(data)):
            outputs[f] = (data / f).read_bytes()
        outputs["sim request log"] = json.dumps(sim.requests).encode()
        outputs["model request bodies"] = b"\n".join(r.raw for r in fake.requests)

        assert any(r["auth"] == "bearer" and r["status"] == 200 for r in sim.requests)  # the key did work
        assert fake.requests and all(r.auth_ok for r in fake.requests)
        assert outputs["log export stdout"].count(b"\n") > 50
        assert sum(sim.fault_counts.values()) > 0
        assert b"model.failed" in outputs["log export stdout"]
        assert canary_hits(outputs) == {}
        assert check_db(db_path(fast_root)) == []
