"""``init --revoke ROLE`` and doctor's role check against a real PostgreSQL server.

The schema's owner makes fleets A and B; roles are bound with ``init --grant`` as an operator would. Revoking
unbinds the role from the config's fleet (one transaction), and REVOKEs what ``--grant`` granted once the
role runs no fleet; it is refused, changing nothing, when run by a role that does not own the schema or for
a role not bound to the fleet. doctor names the role it connects as and the fleets it is bound to, and fails
with the fix when that is not exactly the config's fleet (not bound, or a role shared by several fleets as
migration 003 leaves the role that ran every fleet before an upgrade).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from agent import cli, config
from agent.cli import doctor
from agent.store.pglock import lead_table
from tests.pgserver import PgServer
from tests.store.test_pg_store import write_config


def _url_as(url: str, role: str) -> str:
    u = urlsplit(url)
    return u._replace(netloc=f"{role}@{u.netloc.split('@', 1)[1]}").geturl()


class Setup:
    """The owner's config of each fleet and the server, seen as its superuser."""

    def __init__(self, pg_server: PgServer, pg_url: str, sim_server, tmp_path: Path) -> None:
        self.server = pg_server
        self.url = pg_url
        self.sim_url = sim_server.url
        self.tmp = tmp_path
        self.roles: list[str] = []
        self.owner = {f: write_config(tmp_path / f"owner-{f}", pg_url, sim_server.url, agent_id=f)
                      for f in ("fleet-a", "fleet-b")}

    def su(self) -> psycopg.Connection:
        return psycopg.connect(self.server.dsn(urlsplit(self.url).path.strip("/")), autocommit=True)

    def role(self, name: str) -> str:
        role = f"{name}_{uuid.uuid4().hex[:10]}"
        self.server.psql(f'CREATE ROLE "{role}" LOGIN')
        self.roles.append(role)
        return role

    def runner(self, fleet: str, role: str) -> Path:
        """The config a daemon of ``fleet`` running as ``role`` reads."""
        root = self.tmp / f"{fleet}-{role}"
        cfg = write_config(root, _url_as(self.url, role), self.sim_url, agent_id=fleet)
        (root / "data").mkdir(exist_ok=True)
        return cfg

    def bound(self, role: str) -> list[str]:
        with self.su() as c:
            return [r[0] for r in c.execute("SELECT agent_id FROM fleet_roles WHERE rolname = %s ORDER BY 1",
                                            [role])]

    def privileges(self, role: str) -> dict[str, bool]:
        """What ``--grant`` gives, as the server answers for ``role`` now."""
        with self.su() as c:
            def has(table: str, priv: str) -> bool:
                return bool(c.execute("SELECT has_table_privilege(%s, %s, %s)", [role, table, priv]).fetchone()[0])

            def runs(proc: str) -> bool:
                return bool(c.execute("SELECT has_function_privilege(%s, p.oid, 'EXECUTE') FROM pg_proc p "
                                      "WHERE p.proname = %s", [role, proc]).fetchone()[0])

            return {"events SELECT": has("events", "SELECT"), "events INSERT": has("events", "INSERT"),
                    "intents INSERT": has("intents", "INSERT"),
                    "EXECUTE fleet_agent_rm_intent_result": runs("fleet_agent_rm_intent_result"),
                    "fleets SELECT": has("fleets", "SELECT"),
                    "fleet-a lead UPDATE": has(lead_table("fleet-a"), "UPDATE")}


@pytest.fixture
def setup(pg_server: PgServer, pg_url: str, sim, sim_server, tmp_path: Path, monkeypatch, capsys) -> Iterator[Setup]:
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    s = Setup(pg_server, pg_url, sim_server, tmp_path)
    for cfg in s.owner.values():
        assert cli.main(["--config", str(cfg), "init"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    try:
        yield s
    finally:  # roles are the server's, not the database's: their grants go, then they do
        with s.su() as su:
            for role in s.roles:
                su.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role])
                su.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                su.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _main(capsys: pytest.CaptureFixture[str], cfg: Path, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["--config", str(cfg), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_revoke_unbinds_the_role_and_revokes_its_grants_once_it_runs_no_fleet(setup, capsys):
    """A role bound to fleet A alone: revoke unbinds it and REVOKEs every privilege --grant gave it (the
    leadership table's too); the role's own CLI is then refused with the fix."""
    role = setup.role("runner")
    assert _main(capsys, setup.owner["fleet-a"], "init", "--grant", role)[0] == 0
    runner = setup.runner("fleet-a", role)
    assert _main(capsys, runner, "say", "before the revoke")[0] == 0
    assert all(setup.privileges(role).values())

    code, out, err = _main(capsys, setup.owner["fleet-a"], "init", "--revoke", role)
    assert code == 0, err
    assert f"unbound fleet 'fleet-a' from the role {role}" in out
    assert f'REVOKE SELECT, INSERT ON events FROM "{role}";' in out
    assert setup.bound(role) == []
    assert not any(setup.privileges(role).values()), setup.privileges(role)

    code, _, err = _main(capsys, runner, "say", "after the revoke")
    assert code != 0
    assert role in err and "fleet-a" in err


def test_revoke_of_a_shared_role_keeps_its_grants_while_it_runs_another_fleet(setup, capsys):
    """A role bound to fleets A and B: revoking it from A leaves it bound to B with its privileges (B keeps
    running), and A refuses it; revoking it from B too then revokes the privileges."""
    role = setup.role("shared")
    for fleet in ("fleet-a", "fleet-b"):
        assert _main(capsys, setup.owner[fleet], "init", "--grant", role)[0] == 0
    assert setup.bound(role) == ["fleet-a", "fleet-b"]

    code, out, err = _main(capsys, setup.owner["fleet-a"], "init", "--revoke", role)
    assert code == 0, err
    assert "still bound to fleet-b" in out and "REVOKE" not in out
    assert setup.bound(role) == ["fleet-b"]
    privs = setup.privileges(role)
    assert privs["events INSERT"] and not privs["fleet-a lead UPDATE"]
    assert _main(capsys, setup.runner("fleet-b", role), "say", "fleet-b still runs")[0] == 0
    assert _main(capsys, setup.runner("fleet-a", role), "say", "fleet-a refuses")[0] != 0

    code, out, err = _main(capsys, setup.owner["fleet-b"], "init", "--revoke", role)
    assert code == 0, err
    assert setup.bound(role) == []
    assert not any(setup.privileges(role).values())


def test_revoke_run_by_a_role_that_does_not_own_the_schema_fails_and_changes_nothing(setup, capsys):
    """A granted role running --revoke (its own config) against another role: non-zero, saying it does not
    own the schema and how to run it; the other role stays bound with every privilege."""
    attacker, victim = setup.role("attacker"), setup.role("victim")
    for role in (attacker, victim):
        assert _main(capsys, setup.owner["fleet-a"], "init", "--grant", role)[0] == 0
    before = setup.privileges(victim)

    code, out, err = _main(capsys, setup.runner("fleet-a", attacker), "init", "--revoke", victim)
    assert code != 0
    assert "does not own the fleet-agent schema" in err and "nothing was revoked" in err
    assert "owns the tables" in err  # how to fix: run it with the owner's config
    assert "REVOKE" not in out
    assert setup.bound(victim) == ["fleet-a"]
    assert setup.privileges(victim) == before


def test_revoke_of_a_role_not_bound_to_the_fleet_fails_and_changes_nothing(setup, capsys):
    """The role is bound to fleet B, the owner's config names fleet A: non-zero, naming where the role is
    bound and what to check; its binding and privileges are as they were."""
    role = setup.role("elsewhere")
    assert _main(capsys, setup.owner["fleet-b"], "init", "--grant", role)[0] == 0
    before = setup.privileges(role)

    code, out, err = _main(capsys, setup.owner["fleet-a"], "init", "--revoke", role)
    assert code != 0
    assert "not bound to fleet 'fleet-a' (it is bound to fleet-b)" in err and "nothing was revoked" in err
    assert "agent_id" in err
    assert "REVOKE" not in out
    assert setup.bound(role) == ["fleet-b"]
    assert setup.privileges(role) == before

    code, _, err = _main(capsys, setup.owner["fleet-a"], "init", "--revoke", "no_such_role")
    assert code != 0 and "bound to no fleet" in err


def test_revoke_drops_the_binding_of_a_role_the_server_no_longer_has(setup, capsys):
    """A role dropped after it was bound (DROP OWNED BY, DROP ROLE) leaves its binding behind: revoke removes
    it, with nothing to REVOKE."""
    role = setup.role("gone")
    assert _main(capsys, setup.owner["fleet-a"], "init", "--grant", role)[0] == 0
    with setup.su() as su:
        su.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        su.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    setup.roles.remove(role)
    assert setup.bound(role) == ["fleet-a"]

    code, out, err = _main(capsys, setup.owner["fleet-a"], "init", "--revoke", role)
    assert code == 0, err
    assert "no longer exists" in out
    assert setup.bound(role) == []


def test_revoke_and_grant_together_or_without_a_postgresql_config_are_refused(setup, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--config", str(setup.owner["fleet-a"]), "init", "--grant", "x", "--revoke", "y"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    sqlite_cfg = tmp_path / "lite" / "config.yaml"
    sqlite_cfg.parent.mkdir()
    sqlite_cfg.write_text("agent_id: lite\ndata_dir: ./data\nmodel:\n  provider: rules\n", encoding="utf-8")
    code, _, err = _main(capsys, sqlite_cfg, "init", "--revoke", "someone")
    assert code != 0 and "SQLite" in err and "PostgreSQL storage.url" in err
    assert not (tmp_path / "lite" / "data").exists()


# ------------------------------------------------------------------ doctor's role check


def _role_check(cfg: Path) -> doctor.Check:
    checks = doctor.check_postgres(config.load(str(cfg)))
    return next(c for c in checks if c.name == "role")


def test_doctor_names_the_role_and_passes_when_it_is_bound_to_this_fleet_alone(setup, capsys):
    role = setup.role("runner")
    assert _main(capsys, setup.owner["fleet-a"], "init", "--grant", role)[0] == 0
    checks = doctor.check_postgres(config.load(str(setup.runner("fleet-a", role))))
    assert [c.name for c in checks] == ["postgres", "role", "privileges", "chain"]
    assert all(c.ok for c in checks), checks
    assert checks[1].detail == f"connects as {role}, bound to 'fleet-a' only"


def test_doctor_fails_a_role_not_bound_to_the_configs_fleet_with_the_grant_that_fixes_it(setup, capsys):
    """The config says fleet B, the role is bound to A: the server answers (postgres ok), the role check
    fails naming the role, where it is bound, and the init --grant that binds it."""
    role = setup.role("runner")
    assert _main(capsys, setup.owner["fleet-a"], "init", "--grant", role)[0] == 0
    cfg = setup.runner("fleet-b", role)
    checks = doctor.check_postgres(config.load(str(cfg)))
    assert [(c.name, c.ok) for c in checks] == [("postgres", True), ("role", False)]
    assert checks[1].detail.startswith(f"connects as {role}, bound to 'fleet-a', not to 'fleet-b'")
    assert f"init --grant {role}" in (checks[1].fix or "") and "agent_id is fleet-b" in (checks[1].fix or "")

    code, out, _ = _main(capsys, cfg, "doctor")
    assert code != 0
    assert f"FAIL role       connects as {role}" in out


def test_doctor_fails_a_role_bound_to_several_fleets_and_says_how_to_give_each_its_own(setup, capsys):
    """One role for fleets A and B (as migration 003 leaves the role that ran every fleet): the role check
    fails, naming both fleets and the upgrade, with the steps (--grant a new role, --revoke the shared
    one); after them, each fleet's role passes."""
    shared = setup.role("shared")
    for fleet in ("fleet-a", "fleet-b"):
        assert _main(capsys, setup.owner[fleet], "init", "--grant", shared)[0] == 0
    check = _role_check(setup.runner("fleet-a", shared))
    assert not check.ok
    assert f"connects as {shared}, bound to 2 fleets ('fleet-a', 'fleet-b')" in check.detail
    assert "migration 003" in check.detail
    assert "init --grant NEW" in (check.fix or "") and f"init --revoke {shared}" in (check.fix or "")

    own = setup.role("own_a")  # the fix, for fleet A
    assert _main(capsys, setup.owner["fleet-a"], "init", "--grant", own)[0] == 0
    assert _main(capsys, setup.owner["fleet-a"], "init", "--revoke", shared)[0] == 0
    assert _role_check(setup.runner("fleet-a", own)).ok
    assert _role_check(setup.runner("fleet-b", shared)).ok


def test_doctor_passes_the_schemas_owner_bound_to_every_fleet_it_created(setup, capsys):
    """The owner binds itself to each fleet it creates: with its config, doctor's role check passes and says
    so, rather than failing as a shared daemon role does."""
    check = _role_check(setup.owner["fleet-a"])
    assert check.ok, check
    assert "the schema's owner, bound to the 2 fleets it created ('fleet-a', 'fleet-b')" in check.detail


def test_after_an_upgrade_doctor_fails_the_shared_role_and_its_fix_gives_fleet_a_its_own(pg_server, pg_url, sim,
                                                                                          sim_server, tmp_path,
                                                                                          monkeypatch, capsys):
    """A database written before the bindings, fleets A and B run by one granted role: migration 003 binds
    that role to both, and doctor fails it, pointing at the upgrade. The operator follows the fix for fleet A
    with the CLI (--grant a role of its own, --revoke the shared one): A's new role reads A's whole chain
    and appends to it, the shared role runs B alone, and doctor passes both."""
    from tests.store.test_pg_isolation import _old_schema, old_grants

    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    _old_schema(pg_url, {"fleet-a": 7, "fleet-b": 3})
    s = Setup(pg_server, pg_url, sim_server, tmp_path)
    shared = s.role("old_shared")
    try:
        with psycopg.connect(pg_url, autocommit=True) as c:  # the grants the old init --grant made
            for stmt in old_grants(shared):
                c.execute(stmt)
        assert _main(capsys, s.owner["fleet-a"], "log", "verify")[0] == 0  # the owner's first open upgrades
        assert s.bound(shared) == ["fleet-a", "fleet-b"]
        check = _role_check(s.runner("fleet-a", shared))
        assert not check.ok and "bound to 2 fleets" in check.detail and "migration 003" in check.detail

        own = s.role("own_a")
        assert _main(capsys, s.owner["fleet-a"], "init", "--grant", own)[0] == 0
        code, _, err = _main(capsys, s.owner["fleet-a"], "init", "--revoke", shared)
        assert code == 0, err
        own_cfg = s.runner("fleet-a", own)
        assert _role_check(own_cfg).ok and _role_check(s.runner("fleet-b", shared)).ok
        assert _main(capsys, own_cfg, "say", "fleet-a on a role of its own")[0] == 0
        code, out, err = _main(capsys, own_cfg, "log", "verify")
        assert code == 0 and "ok: 8 events, chain verifies up to seq 8" in out, out + err
    finally:
        with s.su() as su:
            for role in s.roles:
                su.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role])
                su.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                su.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
