"""``python -m agent.cli``: the same as the ``fleet-agent`` command."""

import sys

from agent.cli import main

sys.exit(main())
