"""The pieces a command needs, built lazily from settings: log, prompts, clients.

The CLI, the daemon and the demo all go through one ``App`` so each part is
made the same way everywhere (and closed in one place).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from agent.config import Settings
from agent.context.cache import ProjectionCache
from agent.store.log import EventLog


class App:
    def __init__(self, settings: Settings, *, env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] | None = None, provider: Any = None) -> None:
        self.settings = settings
        self.env = env
        self.clock = clock or time.time  # the fleet's clock (the simulator's, in demos and tests)
        self.lock_held = False  # set by the daemon, which holds the single-writer lock itself
        self._provider = provider
        self._clients: list[Any] = []

    def vast(self) -> Any:
        """A vast.ai client (one per App, reused across ticks)."""
        if "_vast" not in self.__dict__:
            from agent.clients.vast import VastClient

            v = self.settings.vast
            self._vast = VastClient(v.url, self.settings.vast_api_key(self.env).reveal(), timeout=v.timeout,
                                    max_attempts=v.max_attempts)
            self._clients.append(self._vast)
        return self._vast

    def demand(self) -> Any:
        if not self.settings.demand.url:
            return None
        if "_demand" not in self.__dict__:
            from agent.clients.demand import DemandClient

            self._demand = DemandClient(self.settings.demand.url)
            self._clients.append(self._demand)
        return self._demand

    def provider(self) -> Any:
        """The model: an OpenAI-compatible server, or the built-in rules provider."""
        if self._provider is None:
            m = self.settings.model
            if m.provider == "rules":
                from agent.rules import RulesProvider

                self._provider = RulesProvider(self)
            else:
                from agent.llm import OpenAIChat

                key = self.settings.model_api_key(self.env)
                self._provider = OpenAIChat(base_url=m.base_url, model=m.name,
                                            api_key=key.reveal() if key else None, timeout=m.timeout,
                                            temperature=m.temperature, max_tokens=m.max_output_tokens,
                                            max_retries=m.max_retries)
        return self._provider

    @cached_property
    def log(self) -> EventLog:
        c = self.settings.context
        # Events are stamped with the fleet's clock, so policy windows ("rents in the last hour")
        # and observations share one notion of time (wall time in production).
        return EventLog(self.settings.db_path, encoding=c.encoding, encoding_file=c.encoding_file,
                        encoding_sha256=c.encoding_sha256,
                        clock=lambda: datetime.fromtimestamp(self.clock(), UTC))

    @cached_property
    def projection_cache(self) -> ProjectionCache:
        """Token counts and rendered messages shared by every projection this process makes."""
        return ProjectionCache()

    @cached_property
    def prompts(self) -> Any:
        from agent.prompts import load_prompts

        return load_prompts(self.settings.prompts_path)

    def policy_dict(self) -> dict[str, Any]:
        """The fleet policy as the system prompt states it (what code enforces)."""
        d = dataclasses.asdict(self.settings.policy)
        f = self.settings.fleet
        d["fleet_template"] = {"image": f.image, "disk_gb": f.disk_gb, "label_prefix": f.label_prefix}
        return d

    def tool_specs(self) -> list[dict[str, Any]]:
        from tools.registry import tool_specs

        return tool_specs()

    def close(self) -> None:
        for c in self._clients:
            c.close()
        self._clients.clear()
        if "log" in self.__dict__:
            self.log.close()
