"""The tools the model calls: fleet tools over the vast.ai client, memory tools over the log.

The runtime does not import this package: it finds ``TOOLS`` through the
``fleet_agent.tools`` entry point (pyproject.toml; see agent.fleet.toolkit.load_tools).
"""

from agent.fleet.toolkit import AnyTool
from tools.fleet import TOOLS as FLEET_TOOLS
from tools.memory import TOOLS as MEMORY_TOOLS

TOOLS: tuple[AnyTool, ...] = (*FLEET_TOOLS, *MEMORY_TOOLS)
