"""A vast.ai-compatible simulator: market, instances, billing, demand and faults.

    Simulator   all state and logic, pure Python; time comes from an injectable clock
    SimServer   serves a Simulator over HTTP on 127.0.0.1 (ThreadingHTTPServer, daemon thread)
    ManualClock a clock tests advance by hand

The HTTP surface is the one the official `vastai` CLI and agent/clients/vast.py use (see
VAST_API.md): Bearer or `?api_key=` auth, JSON bodies with `Content-Type:
application/json`, v1 instance pagination, the logs `result_url` flow. Admin
endpoints live under `/_sim/` and need no vast auth; `GET /demand` serves the job
queue the fleet works on. With `fleet-agent sim --manual-clock` a scenario is scripted from outside
over HTTP: time, arrivals, prices, credit, host outages, offers, flaps, and the ground-truth
accounting (docs/simulator.md). Everything random is drawn from RNGs seeded by `seed`, so
a seed fixes the market, the bad hosts, each instance's timings and the demand.

The modules, each about one thing:

    clock       ManualClock, the scaled wall clock
    market      GPU models, the seeded offers and bad hosts, offer search
    query       filters, ordering and pagination tokens shared by search and listing
    instances   an instance's record, lifecycle, billing, label/stop/start/reboot
    logs        synthetic logs and the result_url flow
    demand      the job queue: arrivals and completions
    faults      fault-injection knobs and draws
    state       the --state file and the /_sim/state snapshot
    simulator   Simulator, which holds the state and ties the above together
    replies     Reply and ApiError, what a handler returns or raises
    api         request parsing, auth, the request log, the vast.ai route table and its handlers
    admin       the /_sim/ endpoints
    http        SimServer and serve_forever
"""

from agent.sim.clock import DEFAULT_START, ManualClock
from agent.sim.demand import DEMAND_STEP_S
from agent.sim.faults import Faults
from agent.sim.http import SimServer, serve_forever
from agent.sim.instances import OCI_MSG
from agent.sim.market import BEHAVIOURS, GEOLOCATIONS, GPU_MODELS, MODEL_BY_NAME, GpuModel
from agent.sim.replies import ApiError, Reply
from agent.sim.simulator import Simulator
from agent.sim.state import STATE_VERSION

__all__ = [
    "BEHAVIOURS", "DEFAULT_START", "DEMAND_STEP_S", "GEOLOCATIONS", "GPU_MODELS", "MODEL_BY_NAME", "OCI_MSG",
    "STATE_VERSION", "ApiError", "Faults", "GpuModel", "ManualClock", "Reply", "SimServer", "Simulator",
    "serve_forever",
]
