"""Print the README's command marked <!-- NAME-command --> (the fenced block after it)."""

import re
import sys
from pathlib import Path

name = sys.argv[1]
text = Path(__file__).resolve().parents[1].joinpath("README.md").read_text(encoding="utf-8")
m = re.search(rf"<!-- {name}-command -->\s*```(?:sh|bash|console)?\n(.+?)\n```", text, re.S)
if not m:
    sys.exit(f"README.md has no <!-- {name}-command --> block")
print(m.group(1).strip())
