"""``python -m agent.cli``: the same as the ``fleet-agent`` command."""

from agent.cli import entry

entry()
