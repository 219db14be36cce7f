"""The prompt files: the agent's charter and the summariser's instructions.

Prompts are plain Markdown files operators may edit (``system.md``,
``summarize.md``). They are part of what the model sees, so each file's sha256
is recorded in every request manifest and ``replay --verify`` names the file
whose hash changed. ``None`` loads the copies shipped in the package.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from agent.errors import ConfigError

FILES = ("system.md", "summarize.md")


@dataclass(frozen=True)
class Prompts:
    system: str
    summarize: str
    hashes: dict[str, str]


def _read(base: Traversable, name: str, where: str) -> bytes:
    try:
        return base.joinpath(name).read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as e:
        raise ConfigError(
            f"prompt file {where}/{name} is missing; restore it (the package ships a copy in "
            f"agent/prompts/{name}) or set prompts_dir to a directory holding {' and '.join(FILES)}"
        ) from e
    except OSError as e:
        raise ConfigError(f"prompt file {where}/{name} cannot be read: {e.strerror}") from e


def load_prompts(dir: Path | str | None = None) -> Prompts:
    """Load both prompt files from ``dir`` (None = the built-in ones) with their sha256."""
    if dir is None:
        base: Traversable = resources.files("agent") / "prompts"
        where = "agent/prompts"
    else:
        base = Path(dir)
        where = str(base)
    texts: dict[str, str] = {}
    hashes: dict[str, str] = {}
    for name in FILES:
        data = _read(base, name, where)
        try:
            texts[name] = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"prompt file {where}/{name} is not UTF-8 text: {e}") from e
        hashes[name] = hashlib.sha256(data).hexdigest()
    return Prompts(system=texts["system.md"], summarize=texts["summarize.md"], hashes=hashes)


def _policy_lines(policy: dict[str, Any], indent: str = "") -> list[str]:
    lines = []
    for key in sorted(policy):
        value = policy[key]
        if isinstance(value, dict) and value:
            lines.append(f"{indent}- {key}:")
            lines.extend(_policy_lines(value, indent + "  "))
        elif isinstance(value, list | tuple):
            items = ", ".join(json.dumps(v, sort_keys=True, ensure_ascii=False) if not isinstance(v, str) else v
                              for v in value)
            lines.append(f"{indent}- {key}: [{items}]")
        elif isinstance(value, str):
            lines.append(f"{indent}- {key}: {value}")
        else:
            lines.append(f"{indent}- {key}: {json.dumps(value, sort_keys=True, ensure_ascii=False)}")
    return lines


def render_policy(policy: dict[str, Any]) -> str:
    """A deterministic listing of the fleet policy (sorted keys, nested dicts indented)."""
    return "\n".join(_policy_lines(policy)) or "- (no policy settings)"


def render_system(prompts: Prompts, policy: dict[str, Any]) -> str:
    """The system prompt with ``{policy}`` filled in."""
    return prompts.system.replace("{policy}", render_policy(policy))


def render_summarize(prompts: Prompts, max_tokens: int) -> str:
    """The summariser's instructions with ``{max_tokens}`` filled in."""
    return prompts.summarize.replace("{max_tokens}", str(max_tokens))
