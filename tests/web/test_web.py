"""The HTTP side: /metrics, /healthz and every console page, through Starlette's test client over a real
log written by real ticks (the simulator, the rules provider)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from agent import feedback
from agent.cli.context import cmd_context
from agent.runtime.app import App
from agent.runtime.tick import run_tick
from agent.web import Console
from agent.web.routes import WRITE_ROUTES, create_app

TOKEN = "correct-horse-battery-staple-0123"


def _ticks(app: App, clock: Any, n: int) -> None:
    for _ in range(n):
        assert run_tick(app).ok
        clock.advance(300)


@pytest.fixture
def fleet(make_app, sim_clock, tmp_path):
    """A log with three ticks by the rules provider, an open alert and a knowledge file with two versions."""
    (tmp_path / "knowledge").mkdir(exist_ok=True)
    (tmp_path / "knowledge" / "hosts.md").write_text("avoid host 12\n", encoding="utf-8")
    (tmp_path / "token").write_text(TOKEN + "\n", encoding="utf-8")
    # unmet_after 0: the rules provider's first ticks leave jobs waiting; this log's one alert is the model's
    app = make_app(provider="rules", http={"token_file": str(tmp_path / "token"), "token_name": "web-alice"},
                   alerts={"unmet_after": 0})
    _ticks(app, sim_clock, 2)
    (tmp_path / "knowledge" / "hosts.md").write_text("avoid host 12\navoid host <script>alert(1)</script>\n",
                                                     encoding="utf-8")
    feedback.raise_alert(app.log, key="test:1", severity="warning", title="disk <b>full</b> on #7",
                         raised_by="model")
    _ticks(app, sim_clock, 1)
    return app


@pytest.fixture
def console(fleet, sim_clock, sim):
    c = Console(fleet.settings, env={"VAST_API_KEY": sim.api_key}, clock=sim_clock)
    yield c
    c.close()


@pytest.fixture
def client(console):
    with TestClient(create_app(console), base_url="http://127.0.0.1") as c:
        yield c


def _login(client: TestClient) -> str:
    r = client.post("/login", data={"token": TOKEN}, follow_redirects=False)
    assert r.status_code == 303, r.text
    page = client.get("/thread").text
    m = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert m, page
    return m.group(1)


# ------------------------------------------------------------------ metrics and health


def test_metrics_parse_and_count_what_the_log_holds(client, fleet):
    """/metrics is valid Prometheus text: ticks, model steps, tokens, tool calls, fleet, alerts and the log's
    head are there with the values the log gives, and no label carries an instance id."""
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    fams = {f.name: f for f in text_string_to_metric_families(r.text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in fams.values() for s in f.samples}
    assert samples[("fleet_agent_ticks_total", (("outcome", "ok"),))] == 3
    steps = len(list(fleet.log.read(0, kinds=["model.response"])))
    assert samples[("fleet_agent_model_steps_total", ())] == steps > 0
    assert samples[("fleet_agent_log_last_seq", ())] == fleet.log.last_seq()
    assert samples[("fleet_agent_alerts_open", (("severity", "warning"),))] == 1
    assert samples[("fleet_agent_tick_duration_seconds_count", ())] == 3
    assert samples[("fleet_agent_request_budget_tokens", ())] == fleet.settings.context.budget_tokens
    results = list(fleet.log.read(0, kinds=["tool.result"]))
    ok_searches = sum(1 for e in results if e.payload["name"] == "search_offers" and e.payload["ok"])
    assert samples[("fleet_agent_tool_calls_total", (("outcome", "ok"), ("tool", "search_offers")))] == ok_searches > 0
    blocks = len(list(fleet.log.read(0, kinds=["policy.blocked"])))
    assert sum(v for (n, _l), v in samples.items() if n == "fleet_agent_policy_blocks_total") == blocks
    for needed in ("fleet_agent_model_tokens", "fleet_agent_compactions", "fleet_agent_tool_calls",
                   "fleet_agent_policy_blocks", "fleet_agent_fleet_instances", "fleet_agent_fleet_dollars_per_hour",
                   "fleet_agent_fleet_traffic_dollars_per_hour",
                   "fleet_agent_balance_dollars", "fleet_agent_spend_today_dollars", "fleet_agent_spend_month_dollars",
                   "fleet_agent_log_size_bytes", "fleet_agent_last_tick_timestamp_seconds",
                   "fleet_agent_model_idle_ticks", "fleet_agent_policy_max_dollars_per_hour",
                   "fleet_agent_ticks_failed", "fleet_agent_request_tokens"):
        assert needed in fams, needed
    ids = {str(i) for i in fleet.log.store.owned_instance_ids()}
    assert all(v not in ids for (_n, labels) in samples for _k, v in labels)


def test_metrics_fold_only_new_events_and_agree_with_a_fresh_count(client, fleet, sim_clock, console, sim):
    """A second scrape after another tick adds exactly that tick: the incremental totals equal what a
    console started afresh over the same log reports."""
    client.get("/metrics")
    _ticks(fleet, sim_clock, 1)
    again = client.get("/metrics").text
    fresh = Console(fleet.settings, env={"VAST_API_KEY": sim.api_key}, clock=sim_clock)
    try:
        with TestClient(create_app(fresh), base_url="http://127.0.0.1") as c2:
            first = c2.get("/metrics").text

        def counters(text: str) -> dict[Any, float]:
            return {(s.name, tuple(sorted(s.labels.items()))): s.value
                    for f in text_string_to_metric_families(text) if f.type in ("counter", "histogram")
                    for s in f.samples if not s.name.endswith("_created")}
        assert counters(again) == counters(first)
        assert counters(again)[("fleet_agent_ticks_total", (("outcome", "ok"),))] == 4
    finally:
        fresh.close()


def test_healthz_is_200_after_a_recent_tick_and_503_when_ticks_stop(client, sim_clock, fleet):
    """/healthz: 200 while the last tick is younger than 3 intervals; 503 naming why once it is older."""
    r = client.get("/healthz")
    assert r.status_code == 200, r.text
    sim_clock.advance(3 * float(fleet.settings.schedule.interval) + 60)
    r = client.get("/healthz")
    assert r.status_code == 503 and "3 intervals" in r.text


def test_healthz_is_503_when_the_log_failed_verification_at_start(fleet, sim_clock, sim):
    """A console started over a log that failed verification answers 503 with the reason."""
    c = Console(fleet.settings, env={"VAST_API_KEY": sim.api_key}, clock=sim_clock,
                start_problem="seq 4: hash differs")
    try:
        with TestClient(create_app(c), base_url="http://127.0.0.1") as client:
            r = client.get("/healthz")
        assert r.status_code == 503 and "seq 4" in r.text
    finally:
        c.close()


# ------------------------------------------------------------------ pages


def test_every_page_renders_with_a_strict_csp_and_escapes_untrusted_text(client, fleet):
    """Each page answers 200 with the CSP header (no inline script allowed), and text from the model and
    from files appears escaped, never as markup."""
    pages = ["/", "/alerts", "/alerts?status=open&severity=warning", f"/alerts/{_alert_id(fleet)}", "/thread",
             "/thread?kind=tool.&q=tick", "/thread/new?after=1", "/travel", "/travel?tick=2", "/travel?seq=5",
             "/travel/diff?a=3&b=9", "/knowledge", "/knowledge/hosts.md", "/knowledge/hosts.md?v=1", "/login"]
    for path in pages:
        r = client.get(path)
        assert r.status_code == 200, (path, r.text[:500])
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp, path
        assert "<script>alert(1)" not in r.text and "<b>full</b>" not in r.text, path
        assert re.search(r"<script(?![^>]*src=\"/static/htmx\.min\.js\")", r.text) is None, path
    assert "disk &lt;b&gt;full&lt;/b&gt; on #7" in client.get("/alerts").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in client.get("/knowledge/hosts.md").text
    assert client.get("/static/htmx.min.js").status_code == 200


def test_overview_shows_the_fleet_spend_and_open_alerts(client, fleet):
    """The overview names the newest tick, the fleet's instances, spend figures and the open alert."""
    page = client.get("/").text
    assert "#3 ok" in page
    for iid in fleet.log.store.owned_instance_ids():
        assert f"<td>{iid}</td>" in page
    assert 'id="spend-today"' in page and "<svg" in page and "disk &lt;b&gt;full" in page


def test_spend_status_overview_and_metrics_report_one_figure(client, fleet, sim_clock, capsys):
    """For one log at one moment, `fleet-agent spend`, `status`, the overview and /metrics report the same
    spend today and this month: one estimator (agent.fleet.spend) behind all four."""
    import argparse
    import json

    from agent.cli.service import cmd_status
    from agent.cli.spend import cmd_spend

    sim_clock.advance(1800)  # the live instances bill on past the last tick
    assert cmd_spend(argparse.Namespace(json=True), fleet) == 0
    periods = json.loads(capsys.readouterr().out)["periods"]
    today, month = periods["today"]["spent"], periods["month"]["spent"]
    assert month >= today > 0
    assert cmd_status(argparse.Namespace(json=True), fleet) == 0
    st = json.loads(capsys.readouterr().out)["steering"]["spend"]
    assert (st["today"], st["month"]) == (today, month)
    samples = {s.name: s.value for f in text_string_to_metric_families(client.get("/metrics").text)
               for s in f.samples}
    assert (samples["fleet_agent_spend_today_dollars"], samples["fleet_agent_spend_month_dollars"]) == (today, month)
    page = client.get("/").text
    assert f'<span id="spend-today">${today:,.2f}</span>' in page
    assert f'<span id="spend-month">${month:,.2f}</span>' in page


def test_overview_and_alerts_show_the_steering_and_silences_in_force(client, fleet):
    """A pause, a policy override, a host exclusion and an alert silence set by operators appear on the
    overview and the alerts page, operator text escaped; with none in force the pages say so."""
    from agent.fleet import steering

    page = client.get("/").text
    assert "not paused" in page and "no policy overrides" in page
    assert "<h2>Silences in force</h2>" in client.get("/alerts").text
    steering.pause(fleet.log, by="alice", reason="host <i>migration</i>", until=None)
    steering.set_override(fleet.log, fleet.settings, "max_instances", "2", by="bob", reason="budget review",
                          until=None)
    steering.exclude_host(fleet.log, 4417, by="carol", reason="disk errors", source="operator", until=None)
    feedback.silence(fleet.log, by="dave", reason="known flakiness", seconds=7200, key_pattern="stuck:*")
    page = client.get("/").text
    assert "<strong>PAUSED</strong> by alice" in page and "host &lt;i&gt;migration&lt;/i&gt;" in page
    assert re.search(r"override #\d+ · bob: max_instances 2", page) and "4417 (carol" in page
    alerts = client.get("/alerts").text
    assert re.search(r"#\d+ · dave: keys stuck:\* until .* — known flakiness", alerts)


def test_time_travel_hash_equals_the_context_command(client, fleet, capsys):
    """The time-travel view of tick 3 shows the same request hash as `fleet-agent context --tick 3 --json`,
    and says it matches the recorded request."""
    import argparse
    import json

    rc = cmd_context(argparse.Namespace(at=None, tick=3, seq=None, json=True), fleet)
    assert rc == 0
    expected = json.loads(capsys.readouterr().out)["manifest"]["request_hash"]
    page = client.get("/travel?tick=3").text
    assert f'<code id="request-hash">{expected}</code>' in page
    assert "hash matches" in page and 'id="section-system"' in page and 'id="response"' in page


def test_bad_query_values_get_a_clear_400(client):
    """A non-number tick or an unknown alert is a 400 page naming the problem, not a crash."""
    r = client.get("/travel?tick=abc")
    assert r.status_code == 400 and "tick must be a whole number" in r.text
    r = client.get("/alerts/999")
    assert r.status_code == 400 and "no alert #999" in r.text
    r = client.get("/alerts/99999999999999999999999")
    assert r.status_code == 400 and "whole number below 10^18" in r.text
    r = client.get("/travel?seq=-1")
    assert r.status_code == 400 and "seq must be a whole number" in r.text


def test_a_filter_or_moment_that_cannot_be_answered_is_a_4xx_saying_why(client, fleet):
    """An unknown alert status or severity, a time before the first event, a seq or diff end past the log's
    end: 400 naming the problem (the time and seq in the words `fleet-agent context` uses); a knowledge
    version that does not exist: 404. The same queries within the log answer 200."""
    import argparse
    import html

    from agent.errors import UsageError

    r = client.get("/alerts?status=bogus")
    assert r.status_code == 400 and "choose one of: open, acked, resolved" in r.text
    r = client.get("/alerts?severity=loud")
    assert r.status_code == 400 and "'loud' is not an alert severity" in html.unescape(r.text)
    assert client.get("/alerts?status=open&severity=warning").status_code == 200

    with pytest.raises(UsageError) as cli_error:
        cmd_context(argparse.Namespace(at="2001-01-01", tick=None, seq=None, json=True), fleet)
    r = client.get("/travel?at=2001-01-01")
    expected = str(cli_error.value).removeprefix("--at ")
    assert r.status_code == 400 and f"at {expected}" in html.unescape(r.text), r.text
    first = next(fleet.log.read(0, limit=1)).ts
    assert client.get(f"/travel?at={first}").status_code == 200

    last = fleet.log.last_seq()
    with pytest.raises(UsageError) as cli_error:
        cmd_context(argparse.Namespace(at=None, tick=None, seq=last + 1, json=True), fleet)
    r = client.get(f"/travel?seq={last + 1}")
    assert r.status_code == 400 and str(cli_error.value).removeprefix("--") in r.text, r.text
    assert client.get(f"/travel?seq={last}").status_code == 200
    r = client.get(f"/travel/diff?a=1&b={last + 1}")
    assert r.status_code == 400 and f"b {last + 1}: the log ends at seq {last}" in r.text
    r = client.get(f"/travel/diff?a={last + 5}&b=1")
    assert r.status_code == 400 and f"a {last + 5}: the log ends at seq {last}" in r.text

    versions = [v.version for v in fleet.log.store.knowledge_versions("hosts.md")]
    r = client.get(f"/knowledge/hosts.md?v={max(versions) + 1}")
    assert r.status_code == 404 and f"has no version {max(versions) + 1}" in r.text
    assert client.get("/knowledge/hosts.md?v=0").status_code == 404
    assert client.get(f"/knowledge/hosts.md?v={min(versions)}").status_code == 200
    assert client.get("/knowledge/nope.md").status_code == 404


@pytest.mark.parametrize("text", ["a\x00b", "\x00", "stop\x1b[2J", "a\rb", "a\x85b", "\x7f"])
def test_a_note_with_a_control_character_is_a_400_and_appends_nothing(client, fleet, text):
    """A console note or ack note with NUL (PostgreSQL's text columns refuse it), ESC, a lone carriage
    return or a C1 control: 400 naming the character, nothing appended."""
    csrf = _login(client)
    head = fleet.log.last_seq()
    r = client.post("/notes", data={"text": text, "csrf": csrf})
    assert r.status_code == 400 and "holds a control character" in r.text and "remove it" in r.text
    r = client.post(f"/alerts/{_alert_id(fleet)}/ack", data={"note": text, "csrf": csrf})
    assert r.status_code == 400 and "holds a control character" in r.text
    assert fleet.log.last_seq() == head


def test_a_note_from_a_textarea_keeps_its_crlf_line_breaks_and_tabs(client, fleet):
    """A browser's textarea sends CRLF line breaks: such a note (with a tab) is accepted as written."""
    csrf = _login(client)
    r = client.post("/notes", data={"text": "prefer 4090s\r\n\tnot 3090s", "csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303, r.text
    e = next(fleet.log.read(0, kinds=["operator.note"], newest_first=True, limit=1))
    assert e.payload["text"] == "prefer 4090s\r\n\tnot 3090s"


def test_a_write_to_a_bad_alert_id_is_a_400_and_appends_nothing(client, fleet):
    """POST /alerts/abc/ack and a 23-digit id, with a valid session: a 400 naming the problem, no event."""
    csrf = _login(client)
    head = fleet.log.last_seq()
    for bad in ("abc", "99999999999999999999999"):
        r = client.post(f"/alerts/{bad}/ack", data={"note": "x", "csrf": csrf})
        assert r.status_code == 400 and "alert id must be a whole number" in r.text
    assert fleet.log.last_seq() == head


@pytest.mark.parametrize("host", ["127.0.0.1:9464", "localhost:9464", "[::1]:9464", "10.1.2.3", "fleet.example.com",
                                  "ops.corp.example:8080", "corp.example"])
def test_the_console_answers_ip_addresses_localhost_and_configured_names(fleet, sim_clock, sim, host):
    """An IP address or localhost always reaches the console (a rebinding attack needs a name); a name only
    when http.allowed_hosts lists it, exactly or under a ``.domain`` entry."""
    import dataclasses

    http = dataclasses.replace(fleet.settings.http, allowed_hosts=["fleet.example.com", ".corp.example"])
    c = Console(dataclasses.replace(fleet.settings, http=http), env={"VAST_API_KEY": sim.api_key}, clock=sim_clock)
    try:
        with TestClient(create_app(c), base_url="http://127.0.0.1") as client:
            assert client.get("/alerts", headers={"Host": host}).status_code == 200
    finally:
        c.close()


@pytest.mark.parametrize("host", ["evil.example", "fleet.example.com.evil.example", "attacker.test:9464",
                                  "localhost.evil.example"])
def test_a_rebinding_page_gets_nothing_from_the_console(client, fleet, host):
    """A request naming a host the console was not told about (what a DNS-rebinding page sends) gets a 400
    saying how to allow it, on reads and writes, and nothing is appended."""
    head = fleet.log.last_seq()
    r = client.get("/thread", headers={"Host": host})
    assert r.status_code == 400 and "http.allowed_hosts" in r.text and "operator" not in r.text
    r = client.post("/notes", data={"text": "x"}, headers={"Host": host, "Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 400
    assert client.get("/metrics", headers={"Host": host}).status_code == 400
    assert fleet.log.last_seq() == head


def test_wrong_login_tokens_are_limited_per_client_and_the_right_one_still_works_later(client, fleet):
    """Five wrong tokens from one address, then 429 with Retry-After even for the right token; a right token
    never counts as a failure."""
    from agent.web.routes import LOGIN_FAILURES_PER_CLIENT

    assert client.post("/login", data={"token": TOKEN}, follow_redirects=False).status_code == 303
    for _ in range(LOGIN_FAILURES_PER_CLIENT):
        assert client.post("/login", data={"token": "guess"}).status_code == 401
    r = client.post("/login", data={"token": TOKEN}, follow_redirects=False)
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0 and "too many wrong tokens" in r.text


def test_the_login_limiter_forgets_failures_after_its_window():
    """The limiter's window slides: after it, the address may try again; other addresses are not held back
    by one address's failures until the overall cap."""
    from agent.web.routes import LoginLimiter

    now = [1000.0]
    lim = LoginLimiter(per_client=3, overall=5, window_s=60, clock=lambda: now[0])
    for _ in range(3):
        assert lim.wait_s("a") == 0
        lim.failed("a")
    assert lim.wait_s("a") == 60 and lim.wait_s("b") == 0
    lim.failed("b")
    lim.failed("c")
    assert lim.wait_s("d") == 60  # five failures in all: everyone waits
    now[0] += 61
    assert lim.wait_s("a") == 0 and lim.wait_s("d") == 0


# ------------------------------------------------------------------ writes and security


def _alert_id(app: App) -> int:
    """The id of the alert the fixture raised (ticks may have raised others before it)."""
    return next(a.id for a in app.log.store.alerts(all_=True) if a.dedup_key == "test:1")


def _write_requests(alert_id: int) -> list[tuple[str, dict[str, str]]]:
    paths = {"/alerts/{id}/ack": (f"/alerts/{alert_id}/ack", {"note": "host replaced"}),
             "/notes": ("/notes", {"text": "demand spike at 18:00"})}
    assert set(paths) == set(WRITE_ROUTES)
    return list(paths.values())


def test_every_write_route_refuses_without_token_with_wrong_token_and_without_csrf(client, fleet):
    """No token, a wrong bearer token, a forged cookie, and a real session without the CSRF field (or with
    a wrong one): every write route refuses and nothing is appended."""
    head = fleet.log.last_seq()
    for path, data in _write_requests(_alert_id(fleet)):
        assert client.post(path, data=data).status_code == 401
        assert client.post(path, data=data, headers={"Authorization": "Bearer wrong-token"}).status_code == 401
        client.cookies.set("fleet_agent_session", "abc.def")
        assert client.post(path, data=data).status_code == 401
        client.cookies.clear()
    csrf = _login(client)
    for path, data in _write_requests(_alert_id(fleet)):
        assert client.post(path, data=data).status_code == 403
        assert client.post(path, data={**data, "csrf": "0" * len(csrf)}).status_code == 403
    assert fleet.log.last_seq() == head


def test_a_read_only_console_refuses_every_write(fleet, sim_clock, sim):
    """With no token configured the console shows pages but refuses every write (403), even with a header."""
    import dataclasses

    s = dataclasses.replace(fleet.settings, http=dataclasses.replace(fleet.settings.http, token_file=None))
    c = Console(s, env={"VAST_API_KEY": sim.api_key}, clock=sim_clock)
    head = fleet.log.last_seq()
    try:
        with TestClient(create_app(c), base_url="http://127.0.0.1") as client:
            assert client.get("/").status_code == 200
            for path, data in _write_requests(_alert_id(fleet)):
                r = client.post(path, data=data, headers={"Authorization": f"Bearer {TOKEN}"})
                assert r.status_code == 403 and "read-only" in r.text
            assert client.post("/login", data={"token": TOKEN}).status_code == 401
    finally:
        c.close()
    assert fleet.log.last_seq() == head


def test_ack_with_a_session_records_the_token_name_and_the_note(client, fleet):
    """Logged in, an ack with a note appends alert.acked by http.token_name; the page then shows it acked."""
    csrf = _login(client)
    r = client.post(f"/alerts/{_alert_id(fleet)}/ack", data={"note": "host <i>replaced</i>", "csrf": csrf},
                    follow_redirects=True)
    assert r.status_code == 200
    assert 'id="alert-status">acked<' in r.text and "host &lt;i&gt;replaced&lt;/i&gt;" in r.text
    e = next(fleet.log.read(0, kinds=["alert.acked"]))
    assert e.payload["by"] == "web-alice" and e.payload["note"] == "host <i>replaced</i>"


def test_bearer_token_writes_a_note_without_a_session(client, fleet):
    """A client with the bearer token (no cookie, no CSRF: a browser never sends that header by itself)
    appends an operator note under the token's name."""
    r = client.post("/notes", data={"text": "demand spike at 18:00", "pin": "on"},
                    headers={"Authorization": f"Bearer {TOKEN}"}, follow_redirects=False)
    assert r.status_code == 303
    e = next(fleet.log.read(0, kinds=["operator.note"], newest_first=True, limit=1))
    assert e.payload == {"text": "demand spike at 18:00", "by": "web-alice", "pin": True}


def test_an_over_long_ack_note_is_refused_with_the_limit_and_nothing_appended(client, fleet):
    """The ack note limit applies through the console as at the CLI: 400 naming the limit, no event."""
    csrf = _login(client)
    head = fleet.log.last_seq()
    r = client.post(f"/alerts/{_alert_id(fleet)}/ack", data={"note": "x" * 4001, "csrf": csrf})
    assert r.status_code == 400 and "limit is 4000" in r.text
    assert fleet.log.last_seq() == head


def test_config_refuses_a_non_loopback_listen_without_a_token(tmp_path: Path):
    """`http.listen` beyond loopback with no token is refused at load, naming the file, line and fix; with a
    token file set it loads; a malformed listen is refused too."""
    from agent import config
    from agent.errors import ConfigError

    with pytest.raises(ConfigError, match=r"c\.yaml:2: http\.listen: 0\.0\.0\.0 is reachable"):
        config.parse("http:\n  listen: 0.0.0.0:9464\n", str(tmp_path / "c.yaml"))
    s = config.parse("http:\n  listen: 0.0.0.0:9464\n  token_file: tok\n", str(tmp_path / "c.yaml"))
    assert s.http.listen == "0.0.0.0:9464"
    assert config.parse("http:\n  listen: '[::1]:9464'\n", "c.yaml").http.listen == "[::1]:9464"
    assert config.parse("http:\n  listen: null\n", "c.yaml").http.listen is None
    with pytest.raises(ConfigError, match="not HOST:PORT"):
        config.parse("http:\n  listen: localhost\n", "c.yaml")


def test_fleet_agent_web_serves_metrics_and_health_from_the_log_alone(fleet, tmp_path):
    """`fleet-agent web --listen 127.0.0.1:0` (no daemon) prints its URL, serves /metrics that parse and
    /healthz, and exits on SIGINT."""
    import signal
    import subprocess
    import sys

    import httpx
    import yaml

    from tests.service.test_daemon import env_for, wait_for

    s = fleet.settings
    cfg = tmp_path / "web.yaml"
    cfg.write_text(yaml.safe_dump({"agent_id": s.agent_id, "data_dir": str(s.data_path),
                                   "knowledge_dir": str(s.knowledge_path), "vast": {"url": s.vast.url},
                                   "model": {"provider": "rules"}}), encoding="utf-8")
    out = tmp_path / "web.out"
    p = subprocess.Popen([sys.executable, "-m", "agent.cli", "--config", str(cfg), "web", "--listen", "127.0.0.1:0"],
                         env=env_for(), stdout=out.open("w"), stderr=subprocess.STDOUT)
    try:
        m = wait_for(lambda: re.search(r"serving (http://127\.0\.0\.1:\d+)", out.read_text()), "the URL",
                     timeout=90)
        url = m.group(1)
        r = httpx.get(url + "/metrics", timeout=10)
        fams = {f.name for f in text_string_to_metric_families(r.text)}
        assert "fleet_agent_ticks" in fams
        # The fixture's ticks ran on the simulator's clock, long ago in wall time: no recent tick.
        r = httpx.get(url + "/healthz", timeout=10)
        assert r.status_code == 503 and "3 intervals" in r.text
        assert httpx.get(url + "/", timeout=10).status_code == 200
    finally:
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=20) == 0, out.read_text()


def test_the_web_command_refuses_a_public_listen_without_a_token(fleet, tmp_path, capsys):
    """`fleet-agent web --listen 0.0.0.0:PORT` with no token configured exits 2 naming the fix; nothing listens."""
    import yaml

    from agent.cli import main

    s = fleet.settings
    cfg = tmp_path / "web.yaml"
    cfg.write_text(yaml.safe_dump({"data_dir": str(s.data_path), "vast": {"url": s.vast.url}}), encoding="utf-8")
    assert main(["--config", str(cfg), "web", "--listen", "0.0.0.0:0"]) == 2
    err = capsys.readouterr().err
    assert "reachable beyond this machine" in err and "http.token_file" in err


def test_the_daemon_serves_metrics_and_health_and_ticks_on_when_the_port_is_taken(tmp_path):
    """The daemon process serves /healthz (200 once a tick ran) and /metrics at http.listen; a second
    daemon config whose port is taken logs http.unavailable and still ticks (the console is not worth
    stopping the fleet for)."""
    import socket

    import httpx

    from agent.sim import SimServer, Simulator
    from tests.service.test_daemon import start_daemon, wait_for, write_config

    server = SimServer(Simulator(seed=7)).start()
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    procs = []
    try:
        roots = [tmp_path / "a", tmp_path / "b"]
        for root, listen in zip(roots, ["127.0.0.1:0", f"127.0.0.1:{taken.getsockname()[1]}"], strict=True):
            root.mkdir()
            cfg = write_config(root, server.url, interval="2s")
            with cfg.open("a", encoding="utf-8") as f:
                f.write(f"http:\n  listen: {listen}\n")
            procs.append(start_daemon(root, cfg))
        a, b = procs
        url = wait_for(lambda: re.search(r'"url": "(http://127\.0\.0\.1:\d+)"', a.stderr()), "the URL",
                       timeout=90).group(1)
        wait_for(lambda: a.kinds("tick.completed"), "a tick", timeout=90)
        r = httpx.get(url + "/healthz", timeout=10)
        assert r.status_code == 200, r.text
        fams = {f.name: f for f in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=10).text)}
        assert fams["fleet_agent_ticks"].samples
        wait_for(lambda: '"http.unavailable"' in b.stderr() and b.kinds("tick.completed"), "b ticking without HTTP",
                 timeout=90)
        assert "cannot listen on" in b.stderr()
        assert a.stop() == 0 and b.stop() == 0
    finally:
        for p in procs:
            if p.popen.poll() is None:
                p.popen.kill()
        taken.close()
        server.stop()


def test_live_thread_updates_return_only_newer_events(client, fleet):
    """The thread page polls /thread/new?after=SEQ: it returns the events appended after SEQ (a note sent
    meanwhile) and the next poll's cursor, and nothing older."""
    head = fleet.log.last_seq()
    page = client.get("/thread").text
    assert f'hx-get="/thread/new?after={head}"' in page and 'hx-trigger="every 3s"' in page
    feedback.say(fleet.log, "spot prices fall tonight", "bob")
    r = client.get(f"/thread/new?after={head}").text
    assert "spot prices fall tonight" in r and f'id="e{head + 1}"' in r and f'id="e{head}"' not in r
    assert f'hx-get="/thread/new?after={head + 1}"' in r


def test_the_token_comes_from_a_systemd_credential_and_a_missing_one_is_an_error(tmp_path):
    """`http.token_credential` reads $CREDENTIALS_DIRECTORY/NAME; a configured token that is absent, or too
    short, is a ConfigError naming where it was looked for, never the value."""
    from agent import config
    from agent.errors import ConfigError

    s = config.parse("http:\n  token_credential: web_token\n", str(tmp_path / "c.yaml"))
    (tmp_path / "creds").mkdir()
    with pytest.raises(ConfigError, match="no token found in the credential web_token"):
        s.http_token({"CREDENTIALS_DIRECTORY": str(tmp_path / "creds")})
    (tmp_path / "creds" / "web_token").write_text("short\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="shorter than 16") as e:
        s.http_token({"CREDENTIALS_DIRECTORY": str(tmp_path / "creds")})
    assert "short\n" not in str(e.value) and "'short'" not in str(e.value)
    (tmp_path / "creds" / "web_token").write_text(TOKEN + "\n", encoding="utf-8")
    token = s.http_token({"CREDENTIALS_DIRECTORY": str(tmp_path / "creds")})
    assert token is not None and token.reveal() == TOKEN and TOKEN not in repr(token)
    assert config.parse("", "c.yaml").http_token({}) is None


def test_rate_series_leads_with_the_rate_in_force_and_grows_by_a_tick(fleet, sim_clock):
    """The overview's $/h series starts with the rate in force at the window's start and gains each new
    tick's observation."""
    from agent.web.spend import in_window, rate_series

    assert in_window([(0.0, 1.0), (10.0, 2.0), (20.0, 3.0)], 15) == [(10.0, 2.0), (20.0, 3.0)]
    start = sim_clock() - 86400
    first = rate_series(fleet.log.store, start)
    assert len(first) == 3
    _ticks(fleet, sim_clock, 1)
    second = rate_series(fleet.log.store, start)
    assert second[:3] == first and len(second) == 4


def test_a_reload_revokes_a_removed_token_swaps_a_rotated_one_and_moves_the_listen_address(tmp_path):
    """A real daemon with a console: rotate the token file in place and reload (SIGHUP): the old token is
    refused at once, the new one writes. Set token_file to null and reload: every write is refused (403).
    Change http.listen and reload: the console answers at the new address and no longer at the old one."""
    import signal
    import socket

    import httpx

    from agent.sim import SimServer, Simulator
    from tests.service.test_daemon import start_daemon, wait_for, write_config

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    server = SimServer(Simulator(seed=7)).start()
    d = None
    try:
        token = tmp_path / "web-token"
        token.write_text(TOKEN + "\n", encoding="utf-8")
        token.chmod(0o600)
        cfg = write_config(tmp_path, server.url, interval="1h")
        base = cfg.read_text(encoding="utf-8")
        port_a, port_b = free_port(), free_port()
        cfg.write_text(base + f"http:\n  listen: 127.0.0.1:{port_a}\n  token_file: {token}\n  token_name: alice\n",
                       encoding="utf-8")
        d = start_daemon(tmp_path, cfg)
        url = f"http://127.0.0.1:{port_a}"

        def note(u: str, tok: str, text: str) -> int:
            return httpx.post(u + "/notes", data={"text": text}, headers={"Authorization": f"Bearer {tok}"},
                              timeout=10).status_code

        def reloaded(n: int) -> bool:
            return len(d.kinds("config.loaded")) >= n

        wait_for(lambda: d.kinds("tick.completed"), "the first tick", timeout=90)
        assert note(url, TOKEN, "written with the first token") == 303
        new_token = "rotated-token-0123456789abcdef"
        token.write_text(new_token + "\n", encoding="utf-8")
        loaded = len(d.kinds("config.loaded"))
        d.popen.send_signal(signal.SIGHUP)
        wait_for(lambda: reloaded(loaded + 1), "the reload")
        assert note(url, TOKEN, "written with the rotated-out token") == 401
        assert note(url, new_token, "written with the new token") == 303

        cfg.write_text(base + f"http:\n  listen: 127.0.0.1:{port_a}\n  token_file: null\n", encoding="utf-8")
        loaded = len(d.kinds("config.loaded"))
        d.popen.send_signal(signal.SIGHUP)
        wait_for(lambda: reloaded(loaded + 1), "the second reload")
        assert note(url, new_token, "written with the revoked token") == 403

        cfg.write_text(base + f"http:\n  listen: 127.0.0.1:{port_b}\n", encoding="utf-8")
        loaded = len(d.kinds("config.loaded"))
        d.popen.send_signal(signal.SIGHUP)
        wait_for(lambda: reloaded(loaded + 1), "the third reload")
        assert wait_for(lambda: _status(f"http://127.0.0.1:{port_b}/healthz") in (200, 503), "the new address")
        assert _status(url + "/healthz") is None
        notes = [e.payload["text"] for e in d.log.read(0, kinds=["operator.note"])]
        assert notes == ["written with the first token", "written with the new token"]
        assert d.stop() == 0
    finally:
        if d is not None and d.popen.poll() is None:
            d.popen.kill()
        server.stop()


def _status(url: str) -> int | None:
    import httpx

    try:
        return httpx.get(url, timeout=5).status_code
    except httpx.TransportError:
        return None
