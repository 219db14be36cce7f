"""Fixtures around the vast.ai simulator, shared by every test that needs vast.ai.

Registered from tests/conftest.py with `pytest_plugins = ["tests.conftest_sim"]`.

    sim_clock   a ManualClock: time moves only when a test advances it
    sim         Simulator(seed=7) on that clock
    sim_server  the simulator served on 127.0.0.1 (a free port), stopped after the test
    vast        a VastClient against sim_server whose waits (pacing, retries, log polls) never really
                sleep: they move a hand-driven clock the simulator's rate limit and log uploads share
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent.clients.vast import VastClient
from agent.sim import ManualClock, SimServer, Simulator

SIM_SEED = 7


@pytest.fixture
def sim_clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sim(sim_clock: ManualClock) -> Simulator:
    return Simulator(seed=SIM_SEED, clock=sim_clock)


@pytest.fixture
def sim_server(sim: Simulator) -> Iterator[SimServer]:
    server = SimServer(sim).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def vast(sim_server: SimServer, sim: Simulator) -> Iterator[VastClient]:
    wall = ManualClock(0.0)
    sim.wall = wall
    client = VastClient(sim_server.url, sim.api_key, timeout=5.0, sleep=wall.advance, monotonic=wall)
    try:
        yield client
    finally:
        client.close()
