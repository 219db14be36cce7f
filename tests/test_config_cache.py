"""The validated-config cache (agent.config.ConfigCache): a file that validated is served again without
parsing, equal to what parsing gives, and never when the file, the code or the entry changed; a broken file is
never cached; no secret reaches the cache."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent import config

ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-live-0123456789abcdef-never-cached"

CONFIG = """\
agent_id: cache-test
data_dir: ./data
vast:
  api_key_env: null
  api_key_file: ./vast_key
model:
  provider: rules
  timeout: 45s
  price: {input: 2.5, output: 10}
context:
  budget_tokens: 6000
fleet:
  env: {MODE: fast}
policy:
  excluded_hosts: [12, 34]
  max_instances: 4
alerts:
  stuck_after: 15m
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"XDG_CACHE_HOME": str(tmp_path / "cache"), "MODEL_KEY": SECRET}


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    p = tmp_path / "config.yaml"
    p.write_text(CONFIG, encoding="utf-8")
    (tmp_path / "vast_key").write_text(SECRET + "\n", encoding="utf-8")
    return p


def entries(env: dict[str, str]) -> list[Path]:
    d = config.cache_dir(env)
    assert d is not None
    return sorted(d.glob("config-*.json")) if d.exists() else []


def leaves(x: Any) -> Any:
    """``x`` with every value paired with its type, so 1 and 1.0 (or a Duration and a float) differ."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: leaves(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {k: leaves(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [type(x).__name__, [leaves(v) for v in x]]
    return [type(x).__name__, x]


def test_served_settings_equal_parsed_ones_in_value_and_type(cfg: Path, env: dict[str, str]) -> None:
    parsed, broken = config.load_partial(str(cfg), env, from_cache=True)
    assert broken == {} and len(entries(env)) == 1
    served, broken = config.load_partial(str(cfg), env, from_cache=True)
    assert broken == {}
    assert served == parsed == config.parse(cfg.read_text(encoding="utf-8"), str(cfg))
    assert leaves(served) == leaves(parsed)
    assert served.source_path == str(cfg)


def test_a_served_config_loads_neither_pydantic_nor_yaml(cfg: Path, env: dict[str, str]) -> None:
    config.load_partial(str(cfg), env, from_cache=True)
    code = ("import sys, json\nfrom agent import config\n"
            f"s, b = config.load_partial({str(cfg)!r}, {env!r}, from_cache=True)\n"
            "print(json.dumps([s.context.budget_tokens, sorted(b), 'pydantic' in sys.modules, 'yaml' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "")}).stdout
    assert json.loads(out) == [6000, [], False, False]


def test_an_edited_config_is_parsed_again_even_at_the_same_size_and_mtime(cfg: Path, env: dict[str, str]) -> None:
    config.load_partial(str(cfg), env, from_cache=True)
    st = cfg.stat()
    cfg.write_text(CONFIG.replace("budget_tokens: 6000", "budget_tokens: 7000"), encoding="utf-8")
    os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cfg.stat().st_size == st.st_size
    s, _ = config.load_partial(str(cfg), env, from_cache=True)
    assert s.context.budget_tokens == 7000


def test_an_edit_that_breaks_the_config_is_reported_not_served(cfg: Path, env: dict[str, str]) -> None:
    config.load_partial(str(cfg), env, from_cache=True)
    cfg.write_text(CONFIG.replace("max_instances: 4", "max_instances: four"), encoding="utf-8")
    s, broken = config.load_partial(str(cfg), env, from_cache=True)
    assert list(broken) == ["policy"]
    with pytest.raises(config.ConfigError):
        _ = s.policy.max_instances
    before = [p.read_bytes() for p in entries(env)]
    config.load_partial(str(cfg), env, from_cache=True)
    assert [p.read_bytes() for p in entries(env)] == before  # a broken file is not cached


def forge(env: dict[str, str], **key: Any) -> None:
    """Rewrite the one entry with a budget of 1 (its checksum made to match) and ``key`` changed."""
    (p,) = entries(env)
    entry = json.loads(p.read_text(encoding="utf-8"))
    entry["settings"]["context"]["budget_tokens"] = 1
    entry["checksum"] = config._checksum(entry["settings"])
    entry["key"].update(key)
    p.write_text(json.dumps(entry), encoding="utf-8")


def test_the_cache_is_keyed_by_the_code(cfg: Path, env: dict[str, str]) -> None:
    config.load_partial(str(cfg), env, from_cache=True)
    forge(env)  # the key still matches: what the entry says is what is served
    assert config.load_partial(str(cfg), env, from_cache=True)[0].context.budget_tokens == 1
    config.load_partial(str(cfg), env, from_cache=True)
    forge(env, code="0" * 64)  # an entry from other code is not served
    assert config.load_partial(str(cfg), env, from_cache=True)[0].context.budget_tokens == 6000


def test_the_code_hash_changes_with_the_code(tmp_path: Path) -> None:
    code = tmp_path / "agent"
    code.mkdir()
    for name in config._CODE_FILES:
        shutil.copy(ROOT / "agent" / name, code / name)
    assert config.code_hash(code) == config.code_hash()
    with (code / "price.py").open("a", encoding="utf-8") as f:
        f.write("\n# a changed preset table\n")
    assert config.code_hash(code) != config.code_hash()


@pytest.mark.parametrize("damage", [b"", b"{not json", b"[]", b'{"key": 1}', None])
def test_a_damaged_entry_is_a_miss_and_is_replaced(cfg: Path, env: dict[str, str], damage: bytes | None) -> None:
    config.load_partial(str(cfg), env, from_cache=True)
    (p,) = entries(env)
    if damage is None:  # sound JSON, the right key, settings changed without their checksum
        entry = json.loads(p.read_text(encoding="utf-8"))
        entry["settings"]["context"]["budget_tokens"] = 1
        p.write_text(json.dumps(entry), encoding="utf-8")
    else:
        p.write_bytes(damage)
    s, _ = config.load_partial(str(cfg), env, from_cache=True)
    assert s.context.budget_tokens == 6000
    assert config.load_partial(str(cfg), env, from_cache=True)[0] == s
    assert json.loads(p.read_text(encoding="utf-8"))["settings"]["context"]["budget_tokens"] == 6000


def test_an_entry_of_another_shape_is_a_miss(cfg: Path, env: dict[str, str]) -> None:
    config.load_partial(str(cfg), env, from_cache=True)
    (p,) = entries(env)
    entry = json.loads(p.read_text(encoding="utf-8"))
    entry["settings"]["context"]["unknown_setting"] = 1
    entry["checksum"] = config._checksum(entry["settings"])
    p.write_text(json.dumps(entry), encoding="utf-8")
    assert config.load_partial(str(cfg), env, from_cache=True)[0].context == config.parse(CONFIG).context


def test_no_secret_reaches_the_cache(cfg: Path, env: dict[str, str]) -> None:
    cfg.write_text(CONFIG.replace("  provider: rules\n", "  provider: rules\n  api_key_env: MODEL_KEY\n"),
                   encoding="utf-8")
    s, _ = config.load_partial(str(cfg), env, from_cache=True)
    assert s.vast_api_key(env).reveal() == SECRET and s.model_api_key(env) is not None
    (p,) = entries(env)
    assert SECRET not in p.read_text(encoding="utf-8")
    assert oct(p.stat().st_mode & 0o777) == "0o600"


def test_off_means_no_cache(cfg: Path, tmp_path: Path) -> None:
    env = {"FLEET_AGENT_CONFIG_CACHE": "off", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert config.load_partial(str(cfg), env, from_cache=True)[0].agent_id == "cache-test"
    assert not (tmp_path / "cache").exists()


def test_what_acts_on_the_fleet_never_takes_policy_from_the_cache(cfg: Path, env: dict[str, str]) -> None:
    """The cache's directory may be writable by someone who cannot edit the config: an entry rewritten with a
    looser policy (checksum and all) reaches a read command at most; the daemon, a tick, destroy, drain and
    doctor parse the file."""
    from agent.cli import ACTING

    config.load_partial(str(cfg), env, from_cache=True)
    (p,) = entries(env)
    entry = json.loads(p.read_text(encoding="utf-8"))
    entry["settings"]["policy"]["max_instances"] = 400
    entry["checksum"] = config._checksum(entry["settings"])
    p.write_text(json.dumps(entry), encoding="utf-8")
    assert config.load_partial(str(cfg), env)[0].policy.max_instances == 4
    assert {"run", "tick", "destroy", "drain", "doctor"} <= ACTING
