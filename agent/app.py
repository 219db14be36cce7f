"""The pieces a command needs, built lazily from settings: log, prompts, clients.

The CLI, the daemon and the demo all go through one ``App`` so each part is
made the same way everywhere (and closed in one place).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from agent.config import Settings
from agent.log import EventLog


class App:
    def __init__(self, settings: Settings, *, env: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.env = env

    @cached_property
    def log(self) -> EventLog:
        c = self.settings.context
        return EventLog(self.settings.db_path, encoding=c.encoding, encoding_file=c.encoding_file,
                        encoding_sha256=c.encoding_sha256)

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
        if "log" in self.__dict__:
            self.log.close()
