"""The fork's own configuration: the origin's, pointed at the fork directory and the simulator, with the
policy and prompts in force at the fork point, then the operator's change applied.

Written to ``FORKDIR/config.yaml`` so every command works on the fork (``fleet-agent --config
FORKDIR/config.yaml thread show``). The fork's knowledge directory does not exist: the knowledge files stay
as the log recorded them at the fork point.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agent import config
from agent.config import PolicySettings, Settings
from agent.context.inputs import in_force, manifest_of, recorded
from agent.context.prompts import Prompts, load_prompts
from agent.errors import ConfigError, UsageError
from agent.store.log import EventLog

SIM_KEY = "fork-sim-key"


@dataclass(frozen=True)
class Change:
    """What the operator changes in the fork: settings, the prompts, the model."""

    sets: tuple[str, ...] = ()
    prompt_dir: Path | None = None
    model: tuple[str, str] | None = None   # (base URL, model name) of an OpenAI-compatible server
    rules: bool = False                    # the built-in rules provider

    def describe(self) -> list[str]:
        out = list(self.sets)
        if self.prompt_dir is not None:
            out.append(f"prompts from {self.prompt_dir}")
        if self.model is not None:
            out.append(f"model {self.model[1]} at {self.model[0]}")
        if self.rules:
            out.append("model: the built-in rules provider")
        return out


def parse_set(item: str) -> tuple[list[str], Any]:
    """'policy.max_instances=4' -> (['policy', 'max_instances'], 4); the value is read as YAML."""
    key, eq, raw = item.partition("=")
    if not eq or not key.strip():
        raise UsageError(f"--set {item!r} is not KEY=VALUE; write e.g. --set policy.max_instances=4")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        raise UsageError(f"--set {item!r}: the value is not a YAML scalar or list; quote it") from None
    return [k.strip() for k in key.split(".")], value


# What a fork may not change: where it keeps its log, and what it talks to (only its own simulator;
# a fork never reaches the real fleet, the real queue or an operator's pager).
FIXED = ("data_dir", "knowledge_dir", "vast", "demand", "alerts.notify_command", "alerts.notify_timeout")


def apply_set(d: dict[str, Any], item: str) -> None:
    path, value = parse_set(item)
    dotted = ".".join(path)
    if any(dotted == f or dotted.startswith(f + ".") for f in FIXED):
        raise UsageError(f"--set {item!r}: a fork keeps its own {dotted} (its directory and its simulator; it "
                         "never reaches the real fleet); change a policy, context, model or fleet setting instead")
    node: Any = d
    for n, k in enumerate(path):
        if not isinstance(node, dict) or k not in node:
            where = ".".join(path[:n + 1])
            known = ", ".join(sorted(node)) if isinstance(node, dict) else "none (not a section)"
            raise UsageError(f"--set {item!r}: no setting {where}; settings there: {known}")
        if n == len(path) - 1:
            node[k] = value
        node = node[k]


def in_force_at(origin: EventLog, seq: int, settings: Settings) -> tuple[Prompts, dict[str, Any] | None]:
    """The prompts and policy of the origin's last request at or before ``seq`` (recorded by hash in the
    log); today's prompts and no policy when the log has no request or no record of them."""
    today = load_prompts(settings.prompts_path)
    req = next(iter(origin.read(0, until_seq=seq, kinds=["model.request"], newest_first=True, limit=1)), None)
    if req is None:
        return today, None
    texts = recorded(origin, seq)
    then = in_force(manifest_of(req, texts), texts, prompts=today, policy={}, tools=[])
    return then.prompts, (then.policy if "policy" in then.from_log else None)


def _absolute(settings: Settings, p: str | None) -> str | None:
    return str(settings.path(p)) if p else None


def _policy_into(d: dict[str, Any], policy: dict[str, Any]) -> None:
    fields = {f.name for f in dataclasses.fields(PolicySettings)}
    d["policy"].update({k: v for k, v in policy.items() if k in fields})
    tmpl = policy.get("fleet_template") or {}
    d["fleet"].update({k: tmpl[k] for k in ("image", "disk_gb", "label_prefix") if k in tmpl})


# The key sent to a model server named with --model (another server than the configured one never gets
# the configured key).
FORK_MODEL_KEY_ENV = "FLEET_AGENT_FORK_MODEL_KEY"


def _model_into(d: dict[str, Any], change: Change) -> None:
    if change.rules:
        d["model"]["provider"] = "rules"
    elif change.model is not None:
        if change.model[0] != d["model"]["base_url"]:
            d["model"].update({"api_key_env": FORK_MODEL_KEY_ENV, "api_key_file": None, "api_key_credential": None})
        d["model"].update({"provider": "openai", "base_url": change.model[0], "name": change.model[1]})


def write_config(origin_settings: Settings, out: Path, sim_url: str, *, prompts: Prompts,
                 policy: dict[str, Any] | None, change: Change) -> Settings:
    """Write FORKDIR/config.yaml (and the prompts it names) and load it back through the validator."""
    s = origin_settings
    d: dict[str, Any] = json.loads(json.dumps(s.to_dict(), default=str))
    d.update({"data_dir": str(out / "data"), "knowledge_dir": str(out / "knowledge")})
    d["context"]["encoding_file"] = _absolute(s, s.context.encoding_file)
    d["model"]["api_key_file"] = _absolute(s, s.model.api_key_file)
    d["vast"].update({"url": sim_url, "api_key_env": None, "api_key_credential": None,
                      "api_key_file": str(out / "vast_api_key")})
    d["demand"]["url"] = f"{sim_url}/demand" if s.demand.url else None
    d["alerts"]["notify_command"] = None  # a fork pages no one
    d["storage"]["url"] = None  # a fork writes its own SQLite log in its data_dir, never the origin's database
    if change.prompt_dir is not None:
        d["prompts_dir"] = str(change.prompt_dir.resolve())
    else:
        pdir = out / "prompts"
        pdir.mkdir()
        (pdir / "system.md").write_text(prompts.system, encoding="utf-8")
        (pdir / "summarize.md").write_text(prompts.summarize, encoding="utf-8")
        d["prompts_dir"] = str(pdir)
    if policy is not None:
        _policy_into(d, policy)
    _model_into(d, change)
    for item in change.sets:
        apply_set(d, item)
    (out / "vast_api_key").write_text(SIM_KEY + "\n", encoding="utf-8")
    (out / "vast_api_key").chmod(0o600)
    cfg = out / "config.yaml"
    cfg.write_text("# Written by `fleet-agent fork`: the origin's settings at the fork point, with the change "
                   "applied.\n" + yaml.safe_dump(d, sort_keys=False), encoding="utf-8")
    try:
        fork_settings = config.load(str(cfg))
        load_prompts(fork_settings.prompts_path)
    except ConfigError as e:
        raise UsageError(f"the fork's settings do not hold ({'; '.join(change.describe()) or 'no change'}): {e}") \
            from None
    return fork_settings
