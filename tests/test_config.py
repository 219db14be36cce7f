"""Configuration: clear one-line errors, secrets that never leak, an example that cannot drift."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import structlog
import yaml

from agent import config, logsetup
from agent.config import Settings
from agent.errors import ConfigError
from agent.secrets import Secret, scrub
from agent.store.log import EventLog

REPO = Path(__file__).resolve().parents[1]
VAST_KEY = "vk-test-7f3a9c1e5b2d4f60"
MODEL_KEY = "mk-test-c0ffee11deadbeef"
_ENV_DROP = ("VAST_API_KEY", "OPENAI_API_KEY", "CREDENTIALS_DIRECTORY", "FLEET_AGENT_CONFIG")


def cli_many(calls: list[tuple[Path, tuple[str, ...], dict[str, str]]]) -> list[subprocess.CompletedProcess]:
    """Run 'fleet-agent --config PATH ARGS...' for each call, concurrently; results in call order."""
    base = {k: v for k, v in os.environ.items() if k not in _ENV_DROP}
    base["PYTHONPATH"] = str(REPO)
    procs = []
    for path, args, env in calls:
        cmd = [sys.executable, "-m", "agent.cli", "--config", str(path), *args]
        procs.append((cmd, subprocess.Popen(cmd, env={**base, **env}, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True)))
    out = []
    for cmd, p in procs:
        stdout, stderr = p.communicate(timeout=120)
        out.append(subprocess.CompletedProcess(cmd, p.returncode, stdout, stderr))
    return out


def parse_error(text: str) -> str:
    with pytest.raises(ConfigError) as exc:
        config.parse(text, "/etc/fa/config.yaml")
    return str(exc.value)


# ------------------------------------------------------------------ errors


def test_malformed_yaml_names_the_line():
    """A YAML syntax error names the file and the line of the problem."""
    msg = parse_error("agent_id: fleet-1\nschedule:\n  interval: 5m: 3\n")
    assert msg.startswith("/etc/fa/config.yaml:3: not valid YAML")
    msg = parse_error("agent_id: fleet-1\npolicy:\n  allowed_gpus: [RTX 4090\n")
    assert "not valid YAML" in msg and "line 3" in msg


@pytest.mark.parametrize(("text", "hint"), [
    ("schedul:\n  interval: 5m\n", "/etc/fa/config.yaml:1: schedul: unknown key; did you mean 'schedule'?"),
    ("policy:\n  max_instance: 3\n", "config.yaml:2: policy.max_instance: unknown key; did you mean "
     "'policy.max_instances'?"),
    ("model:\n  temprature: 0.1\n", "did you mean 'model.temperature'?"),
    ("fleet:\n  zzz: 1\n", "valid keys here: disk_gb, env, image"),
])
def test_unknown_key_suggests_the_right_one(text, hint):
    """An unknown key is refused with its line and the nearest valid key (or the list of valid keys)."""
    assert hint in parse_error(text)


@pytest.mark.parametrize(("text", "fragment"), [
    ("schedule:\n  max_steps: many\n", "config.yaml:2: schedule.max_steps: expected an integer, got 'many'"),
    ("schedule:\n  interval: soon\n", "schedule.interval: expected a duration"),
    ("policy:\n  dry_run: 'yes'\n", "policy.dry_run: expected true or false"),
    ("policy:\n  allowed_gpus: RTX 4090\n", "policy.allowed_gpus: expected a list of strings"),
    ("policy:\n  max_total_dph: true\n", "expected a number"),
    ("logging: verbose\n", "logging: expected a mapping"),
    ("context:\n  high_water: 0.3\n  low_water: 0.5\n", "context.high_water"),
    ("- a\n- b\n", "the top level must be a mapping"),
    ("agent_id: a\nagent_id: b\n", "config.yaml:2: agent_id: the key appears twice"),
    ("logging:\n  level: loud\n", "config.yaml:2: logging.level: expected one of 'debug', 'info', 'warning', "
     "'error', got 'loud'"),
    ("logging:\n  format: xml\n", "logging.format: expected one of 'auto', 'json', 'console'"),
    ("model:\n  provider: gpt\n", "config.yaml:2: model.provider: expected one of 'openai', 'rules', got 'gpt'"),
    ("schedule:\n  cron: '*/5 * * *'\n", "config.yaml:2: schedule.cron: '*/5 * * *' is not a valid cron expression"),
    ("alerts:\n  repeat_after: 10s\n", "config.yaml:2: alerts.repeat_after: must be at least 1m (got 10s)"),
    ("policy:\n  retire_ahead_hours: 0\n", "config.yaml:2: policy.retire_ahead_hours: must be above 0 (got 0)"),
])
def test_wrong_types_and_values_are_refused(text, fragment):
    """A value of the wrong type or out of range names the key, its line and what was expected."""
    assert fragment in parse_error(text)


@pytest.mark.parametrize("key", ["api_key", "token", "password", "model_key"])
def test_secret_in_yaml_is_refused_without_echoing_it(key):
    """A secret written into the YAML is refused, and the error never repeats its value."""
    section = "model" if key != "token" else "vast"
    msg = parse_error(f"{section}:\n  {key}: {VAST_KEY}\n")
    assert "secrets never go in the config file" in msg
    assert VAST_KEY not in msg


def test_cron_is_read_by_the_scheduler_parser_at_load():
    """A cron expression with 5 fields but an impossible value (minute 99, a zero step, an unknown
    weekday) is refused when the config loads, naming its line and how to write one; a valid one loads."""
    for expr, why in (("99 * * * *", "higher than the maximum value (59)"), ("*/0 * * * *", "Increment"),
                      ("0 9 * * funday", "weekday")):
        msg = parse_error(f"agent_id: fleet-1\nschedule:\n  cron: '{expr}'\n")
        assert msg.startswith(f"/etc/fa/config.yaml:3: schedule.cron: '{expr}' is not a valid cron expression")
        assert why in msg and "e.g. '*/5 * * * *'" in msg
    assert config.parse("schedule:\n  cron: '0 */2 * * mon-fri'\n").schedule.cron == "0 */2 * * mon-fri"


@pytest.mark.parametrize(("text", "hours"), [
    ("", 1.0),  # policy.retire_ahead_hours, over two 5-minute ticks
    ("schedule:\n  cron: '0 * * * *'\n", 2.0),  # hourly ticks: two of them
    ("schedule:\n  cron: '7,37 * * * *'\n", 1.0),
    ("schedule:\n  cron: '0 9 * * mon-fri'\n", 24.0),  # the weekend's 72 h gap, capped by contract_min_hours
    ("schedule:\n  interval: 45m\npolicy:\n  retire_ahead_hours: 0.5\n", 1.5),
    ("policy:\n  contract_min_hours: 0\n", 0.0),  # ends not looked at: nothing is retired ahead
])
def test_an_instance_is_retired_two_ticks_ahead_at_least_whatever_the_schedule(text, hours):
    """An instance facing its end is retired ``policy.retire_ahead_hours`` before it, never under two of the
    schedule's longest waits between ticks (one tick rents the replacement, the next rents again if that start
    fails), nor beyond ``policy.contract_min_hours``."""
    assert config.parse(text).retire_ahead_s() == pytest.approx(hours * 3600.0)


def test_cli_config_errors_exit_2_with_one_line(tmp_path):
    """'config check' on a broken config (an impossible cron expression included), or without the
    vast.ai key, exits 2 with one line on stderr."""
    cases = {
        "cron.yaml": ("schedule:\n  cron: '99 * * * *'\n", "cron.yaml:2: schedule.cron: '99 * * * *' is not a valid cron"),
        "syntax.yaml": ("schedule:\n  interval: 5m: 3\n", "syntax.yaml:2: not valid YAML"),
        "unknown.yaml": ("schedul: {}\n", "did you mean 'schedule'?"),
        "type.yaml": ("schedule:\n  max_steps: many\n", "expected an integer"),
        "secret.yaml": (f"vast:\n  api_key: {VAST_KEY}\n", "secrets never go in the config file"),
        "nokey.yaml": ("data_dir: ./data\n", "vast.api_key: no key found; set $VAST_API_KEY"),
        "budget.yaml": ("context:\n  budget_tokens: 8000\n", "the smallest budget that works with these caps is 21,500"),
    }
    cases["missing.yaml"] = (None, "missing.yaml: no such config file")
    for name, (text, _) in cases.items():
        if text is not None:
            (tmp_path / name).write_text(text)
    results = cli_many([(tmp_path / name, ("config", "check"), {}) for name in cases])
    for (name, (_, fragment)), r in zip(cases.items(), results, strict=True):
        assert r.returncode == 2, (name, r.stderr)
        assert r.stdout == ""
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("fleet-agent: "), r.stderr
        assert fragment in r.stderr
        assert VAST_KEY not in r.stderr


# ------------------------------------------------------------------ secrets


def test_secrets_never_appear_in_cli_output(tmp_path):
    """With the keys set through the environment or as systemd credentials, 'config check' and 'config show'
    succeed and neither key appears in stdout or stderr."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text("data_dir: ./data\nmodel:\n  api_key_env: null\n")
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "vast_api_key").write_text(VAST_KEY + "\n")
    (creds / "model_api_key").write_text(MODEL_KEY + "\n")
    calls = [(cfg, args, env) for env in ({"VAST_API_KEY": VAST_KEY, "CREDENTIALS_DIRECTORY": str(creds)},
                                          {"CREDENTIALS_DIRECTORY": str(creds)})
             for args in (("config", "check"), ("config", "show"))]
    results = cli_many(calls)
    for r in results:
        assert r.returncode == 0, r.stderr
        for key in (VAST_KEY, MODEL_KEY):
            assert key not in r.stdout and key not in r.stderr
    assert "ok (config hash" in results[0].stdout
    shown = json.loads(results[1].stdout)
    assert shown["vast"]["api_key_env"] == "VAST_API_KEY" and shown["model"]["api_key_env"] is None


def test_secret_sources_in_order(tmp_path):
    """A key comes from the environment variable, else the key file, else the systemd credential."""
    (tmp_path / "key.txt").write_text("from-file-1234\n")
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "vast_api_key").write_text("from-cred-1234")
    s = config.parse("vast:\n  api_key_file: key.txt\n", str(tmp_path / "config.yaml"))
    assert s.vast_api_key({"VAST_API_KEY": "from-env-1234"}).reveal() == "from-env-1234"
    assert s.vast_api_key({"CREDENTIALS_DIRECTORY": str(creds)}).reveal() == "from-file-1234"
    s2 = config.parse("data_dir: ./d\n", str(tmp_path / "config.yaml"))
    key = s2.vast_api_key({"CREDENTIALS_DIRECTORY": str(creds)})
    assert key.reveal() == "from-cred-1234" and key.origin == "credential vast_api_key"
    assert s2.model_api_key({}) is None
    missing = config.parse("vast:\n  api_key_file: nope.txt\n", str(tmp_path / "config.yaml"))
    with pytest.raises(ConfigError, match="cannot read the key file"):
        missing.vast_api_key({})


def test_secret_object_never_prints_its_value():
    """A Secret's repr and str name its origin only."""
    s = Secret(VAST_KEY, "$VAST_API_KEY")
    for text in (repr(s), str(s), f"{s}", repr({"k": s}), repr([s])):
        assert VAST_KEY not in text and "$VAST_API_KEY" in text
    assert scrub(f"Authorization: Bearer {VAST_KEY}") == "Authorization: Bearer ***"


def test_secret_never_reaches_the_database(tmp_path):
    """After resolving the keys and appending the events a start writes (settings included), the database
    file bytes (WAL included) never contain a key."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text("data_dir: ./data\n")
    s = config.load(str(cfg), env={})
    vast = s.vast_api_key({"VAST_API_KEY": VAST_KEY})
    model = s.model_api_key({"OPENAI_API_KEY": MODEL_KEY})
    assert vast.reveal() == VAST_KEY and model is not None
    with EventLog(s.db_path) as log:
        log.append("config.loaded", {"config_hash": s.config_hash(), "path": str(cfg), "settings": s.to_dict(),
                                     "keys": {"vast": repr(vast), "model": str(model)}}, "system")
        log.append("daemon.started", {"version": "0", "config_hash": s.config_hash(), "prompt_hashes": {}},
                   "system")
        log.append("operator.note", {"text": scrub(f"rotated key {VAST_KEY}"), "by": "ops"}, "operator")
        blob = b"".join(p.read_bytes() for p in s.data_path.iterdir() if p.is_file())
    assert s.db_path.exists()
    for key in (VAST_KEY, MODEL_KEY):
        assert key.encode() not in blob


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_secret_never_reaches_structlog_output(fmt):
    """Logging anything that carries a resolved key (as a value, inside text, under a credential-named key,
    nested, or in an exception) writes *** instead of the key."""
    key = Settings().vast_api_key({"VAST_API_KEY": VAST_KEY})
    buf = io.StringIO()
    logsetup.configure("debug", fmt, stream=buf)
    try:
        log = structlog.get_logger("test")
        log.info("request", url=f"https://console.vast.ai/api/v0/instances?api_key={key.reveal()}",
                 headers={"Authorization": f"Bearer {key.reveal()}"}, api_key=key.reveal(), key=key,
                 note=f"the key is {key.reveal()}", items=[key.reveal(), ("x", key.reveal())])
        log.warning(key.reveal())
        try:
            raise RuntimeError(f"refused key {key.reveal()}")
        except RuntimeError:
            log.exception("call failed")
    finally:
        structlog.reset_defaults()
    out = buf.getvalue()
    assert "request" in out and "call failed" in out and "***" in out
    assert VAST_KEY not in out


# ------------------------------------------------------------------ the example


def test_example_parses_to_exactly_the_defaults():
    """config.example.yaml, as shipped, parses to Settings() with nothing changed."""
    parsed = config.parse(config.example_text(), str(REPO / "config.example.yaml"))
    assert parsed == Settings()
    assert (REPO / "config.example.yaml").read_text() == config.example_text()


def _fields(cls: type, prefix: str = "") -> list[str]:
    out = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        name = prefix + f.name
        if dataclasses.is_dataclass(f.default_factory if f.default_factory is not dataclasses.MISSING else None):
            out.extend(_fields(f.default_factory, name + "."))
        else:
            out.append(name)
    return out


def test_example_names_every_setting():
    """Every field of every settings dataclass is written out in config.example.yaml, and nothing else is."""
    data = yaml.safe_load(config.example_text())

    def keys(d: dict, prefix: str = "") -> list[str]:
        out = []
        for k, v in d.items():
            if isinstance(v, dict) and k not in ("env", "jobs_per_hour_by_gpu"):
                out.extend(keys(v, prefix + k + "."))
            else:
                out.append(prefix + k)
        return out

    want = _fields(Settings)
    assert "schedule.interval" in want and "alerts.notify_timeout" in want
    assert sorted(keys(data)) == sorted(want)


def test_the_database_keeps_its_file_name_across_upgrades(tmp_path):
    """The database file is `<data_dir>/fleet-agent.db` (with `.head` beside it): an upgrade that renamed
    it would leave every operator's history behind and refuse to start."""
    s = config.parse(f"data_dir: {tmp_path}\n", str(tmp_path / "config.yaml"))
    assert s.db_path == tmp_path / "fleet-agent.db"


# ------------------------------------------------------------------ durations, files, paths


@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 30), ("0.6s", 0.6), ("5m", 300), (" 2h ", 7200), ("1d", 86400), ("1w", 604800), ("1.5 h", 5400),
    ("250ms", 0.25),
])
def test_durations_take_every_unit(text, seconds):
    """A duration is seconds, or a number with s, m, h, d or w (ms too)."""
    s = config.parse(f"policy:\n  host_failure_exclusion: '{text}'\n")
    assert float(s.policy.host_failure_exclusion) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["soon", "5 x", "-5m", "1y", "m", "1e3s", "5m5s"])
def test_a_duration_not_written_so_is_refused(text):
    assert "policy.host_failure_exclusion: expected a duration" in parse_error(
        f"policy:\n  host_failure_exclusion: '{text}'\n")


def test_hostile_yaml_is_refused_fast():
    """Nested aliases (the "billion laughs"), an oversized file and deep nesting are refused at once,
    naming the line; an empty section means its defaults."""
    import time

    bomb = "\n".join(['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'] +
                     [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)])
    t0 = time.monotonic()
    assert "config.yaml:2: b.0: anchors (&name) and aliases (*name) are not allowed" in parse_error(bomb)
    assert "too large for a config file" in parse_error("a: 1\n" * 300_000)
    assert "nested too deeply" in parse_error("".join(" " * i + f"k{i}:\n" for i in range(40)))
    assert "not valid YAML" in parse_error("a: " + "[" * 5000 + "\n")
    assert time.monotonic() - t0 < 5
    assert config.parse("alerts:\npolicy:\n").alerts == config.AlertSettings()


def test_the_first_problem_in_the_file_is_named():
    """Of several problems, the error names the one on the earliest line."""
    msg = parse_error("zz: 1\npolicy:\n  max_instances: x\nschedule:\n  interval: soon\n")
    assert msg.startswith("/etc/fa/config.yaml:1: zz: unknown key")
    msg = parse_error("schedule:\n  interval: soon\npolicy:\n  max_instances: x\n")
    assert msg.startswith("/etc/fa/config.yaml:2: schedule.interval: expected a duration")


def test_the_usual_loopback_hosts_are_loopback() -> None:
    for host, expected in (("localhost", True), ("127.0.0.1", True), ("::1", True), ("127.1.2.3", True),
                           ("0.0.0.0", False), ("10.0.0.1", False), ("example.com", False), ("[::1]", False)):
        assert config.is_loopback(host) == expected, host


def test_find_config_and_load_name_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """find_config returns a Path; load reads the file it finds (through --config, $FLEET_AGENT_CONFIG
    or ./config.yaml) and keeps its path, as pathlib writes it, as source_path; a missing, oversized or
    non-UTF-8 file is refused naming what was given."""
    monkeypatch.chdir(tmp_path)
    Path("config.yaml").write_text("agent_id: here\n", encoding="utf-8")
    Path("sub").mkdir()
    Path("sub/other.yaml").write_text("agent_id: there\r\n", encoding="utf-8")
    assert config.find_config(None, {}) == Path("config.yaml")
    assert isinstance(config.find_config("./sub//other.yaml", {}), Path)
    s = config.load(None, {})
    assert (s.agent_id, s.source_path, s.base_dir) == ("here", "config.yaml", tmp_path.resolve())
    s = config.load("./sub//other.yaml/", {})
    assert (s.agent_id, s.source_path) == ("there", "sub/other.yaml")
    s = config.load(None, {"FLEET_AGENT_CONFIG": "sub/./other.yaml"})
    assert s.source_path == "sub/other.yaml"
    with pytest.raises(ConfigError, match=r"^\$FLEET_AGENT_CONFIG=sub/nothing.yaml: no such file$"):
        config.load(None, {"FLEET_AGENT_CONFIG": "./sub//nothing.yaml"})
    with pytest.raises(ConfigError, match=r"^sub/: no such config file"):
        config.load("sub/", {})
    Path("sub/bad.yaml").write_bytes(b"agent_id: \xff\n")
    with pytest.raises(ConfigError, match=r"^sub/bad.yaml: not UTF-8 text; save the config as UTF-8$"):
        config.load("./sub/bad.yaml", {})
    Path("sub/big.yaml").write_text("# x\n" * 300_000, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^sub/big.yaml: 1200000 bytes is too large for a config file"):
        config.load("sub/big.yaml", {})


def test_the_database_file_text_is_the_database_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings.db_file is str(Settings.db_path): data_dir relative, absolute, with '~', '$VAR', './' and
    doubled slashes; storage.url as a file; the config loaded through a symlink from another directory
    (its real directory is the base) and a config with no file (the working directory is the base)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DATA_ROOT", str(tmp_path / "root"))
    (tmp_path / "real").mkdir()
    (tmp_path / "link").mkdir()
    monkeypatch.chdir(tmp_path / "link")
    expected = {"./data": tmp_path / "real/data", "/abs/./data": Path("/abs/data"),
                "~/fleet": tmp_path / "home/fleet", "$DATA_ROOT/d": tmp_path / "root/d"}
    for i, (data_dir, want) in enumerate(expected.items()):
        text = f"agent_id: a\ndata_dir: {data_dir!r}\n"
        real = tmp_path / "real" / f"c{i}.yaml"
        real.write_text(text, encoding="utf-8")
        (tmp_path / "link" / f"c{i}.yaml").symlink_to(real)
        s = config.load(f"c{i}.yaml")
        assert s.db_path == want.resolve() / "fleet-agent.db" and s.db_file == str(s.db_path), data_dir
    s = config.parse("agent_id: a\nstorage:\n  url: ./db//here.sqlite\n", "<string>")
    assert s.db_file == str(s.db_path) == str(Path.cwd() / "db/here.sqlite")
