"""Times and ranges on the read commands: ISO, relative and day forms, refusals before the first event and
for negative seqs, ``thread show --tail``."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from agent import cli
from agent.cli.args import parse_when, seq_or_when
from agent.errors import UsageError
from tests.cli.test_cli_core import site  # noqa: F401 - the fixture

NOW = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "ts"), [
    ("now", "2026-12-01T03:00:00.000000Z"),
    ("10m", "2026-12-01T02:50:00.000000Z"),
    ("2h ago", "2026-12-01T01:00:00.000000Z"),
    ("3d", "2026-11-28T03:00:00.000000Z"),
    ("yesterday 15:45", "2026-11-30T15:45:00.000000Z"),
    ("Today 09:05", "2026-12-01T09:05:00.000000Z"),
    ("2026-11-29T10:05Z", "2026-11-29T10:05:00.000000Z"),
    ("2026-11-29 12:05+02:00", "2026-11-29T10:05:00.000000Z"),
    ("-5m", "2026-12-01T02:55:00.000000Z"),
    ("3:45 PM yesterday", "2026-11-30T15:45:00.000000Z"),
])
def test_time_forms(text, ts):
    """Every documented time form turns into the log's UTC timestamp, relative ones counted from ``now``."""
    assert parse_when(text, NOW) == ts


@pytest.mark.parametrize("text", ["tomorrow", "yesterday 25:00", "10 parsecs", "10", ""])
def test_bad_times_name_the_forms(text):
    """A string that is no time is a UsageError naming the accepted forms."""
    with pytest.raises(UsageError, match="yesterday 15:45|from 00:00 to 23:59"):
        parse_when(text, NOW)


def test_negative_seq_is_refused():
    """A negative seq is refused with the flag named, not read as a time or as 0."""
    with pytest.raises(UsageError, match="--since '-3': a seq is 0 or more"):
        seq_or_when("-3", "--since")
    assert seq_or_when("3", "--since") == (3, None)


def _run(capsys, cfg, *argv):
    code = cli.main(["--config", str(cfg), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_thread_show_tail_and_ranges(site, capsys):  # noqa: F811
    """--tail N prints the newest N (of the wanted kinds) in order; --until before the first event and a
    --since beyond the end are errors (exit 2), not empty output; --since accepts 'now'."""
    cfg, _ = site
    code, out, _ = _run(capsys, cfg, "thread", "show", "--tail", "2")
    assert code == 0 and [ln.split()[0] for ln in out.splitlines() if ln.startswith("#")] == ["#6", "#7"]
    code, out, _ = _run(capsys, cfg, "thread", "show", "--tail", "1", "--kind", "tool.", "--json")
    assert code == 0 and [json.loads(x)["seq"] for x in out.splitlines()] == [4]
    code, _, err = _run(capsys, cfg, "thread", "show", "--until", "2026-11-28T00:00Z")
    assert code == 2 and "before the first event" in err
    code, _, err = _run(capsys, cfg, "thread", "show", "--since", "99")
    assert code == 2 and "the log ends at seq 7" in err
    code, out, _ = _run(capsys, cfg, "thread", "show", "--since", "now")
    assert code == 0 and out == ""


def test_context_at_before_first_event_is_an_error(site, capsys):  # noqa: F811
    """context --at a time before the first event is an error naming the first event's time; --at now
    works; the --tick error names a command that exists."""
    cfg, _ = site
    code, _, err = _run(capsys, cfg, "context", "--at", "2026-11-01T00:00Z")
    assert code == 2 and "before the first event (2026-11-29T10:00:00Z)" in err
    code, _, err = _run(capsys, cfg, "context", "--tick", "9")
    assert code != 0 and "fleet-agent thread show --kind model.request" in err
    suggested = err.split("'")[1].split()[1:]
    assert cli.main(["--config", str(cfg), *suggested]) == 0


def test_log_export_since_a_time(site, capsys):  # noqa: F811
    """log export --since accepts a time as well as a seq."""
    cfg, _ = site
    code, out, _ = _run(capsys, cfg, "log", "export", "--since", "2026-11-29T10:05Z")
    assert code == 0 and [json.loads(x)["seq"] for x in out.splitlines()] == [6, 7]
    code, out, _ = _run(capsys, cfg, "log", "export", "--since", "5")
    assert [json.loads(x)["seq"] for x in out.splitlines()] == [6, 7]
