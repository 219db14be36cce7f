"""Instance logs and the `result_url` flow that serves them.

PUT /instances/request_logs/{id}/ answers with a `result_url`; fetching it answers 404
NoSuchKey until the upload is ready, `realism.logs_delay` wall-clock seconds later (as the real
storage does while the upload is in flight), and then the text. The text is what a test planted for the instance, or a synthetic prover log made
from the instance's state.
"""

from __future__ import annotations

from typing import Any

from agent.sim.clock import iso
from agent.sim.instances import OCI_MSG, Instance, irng, jobs_per_h
from agent.sim.replies import Reply, text_reply

MAX_RESULTS = 500


def synthetic_logs(seed: int, inst: Instance, now: float) -> str:
    r = irng(seed, inst["id"], "logs")
    lines = [f"[{iso(inst['start_date'])}] pulling {inst['image_uuid']}", "container started"]
    if inst["actual_status"] in ("created",) and inst["_behaviour"] == "oci_fail":
        return OCI_MSG + "\n"
    since = inst["_running_since"]
    if since is None and inst["actual_status"] != "exited":
        return "\n".join(lines + ["waiting for image layers..."]) + "\n"
    lines.append(f"prover: {inst['num_gpus']}x {inst['gpu_name']} detected, CUDA {inst['cuda_max_good']}")
    t = since or inst["start_date"]
    job = r.randrange(10_000, 90_000)
    end = now if since is not None else inst["start_date"] + 600
    while t < end and len(lines) < 400:
        dur = r.uniform(120, 600) / max(1.0, jobs_per_h(inst) / 8)
        t += dur
        job += 1
        lines.append(f"[{iso(t)}] prover: job {job} proved in {dur:.1f}s (gpu util {r.randint(85, 99)}%)")
    if inst["actual_status"] == "exited":
        lines.append("CUDA error: out of memory; Killed")
    return "\n".join(lines) + "\n"


def tail_lines(text: str, tail: int) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[-tail:]) if tail > 0 else ""


class LogResults:
    """The uploaded log texts, by token, each answering NoSuchKey until it is ready."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._results: dict[str, dict[str, Any]] = {}
        self._seq = 0

    def put(self, iid: int, text: str, ready_at: float) -> str:
        """Store `text` for instance `iid`, ready at wall time `ready_at`; return its token (the result_url's
        file name)."""
        self._seq += 1
        token = f"{iid}-{self._seq}-{irng(self._seed, iid, f'tok{self._seq}').randrange(16**8):08x}"
        self._results[token] = {"text": text, "ready_at": ready_at}
        if len(self._results) > MAX_RESULTS:
            self._results.pop(next(iter(self._results)))
        return token

    def fetch(self, token: str, now: float) -> Reply:
        res = self._results.get(token)
        if res is None or now < res["ready_at"]:
            return text_reply(404, "NoSuchKey")
        return text_reply(200, res["text"])
