"""The console in a real browser: headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium) against a running daemon process, the simulator and the rules provider on 127.0.0.1.

A screenshot of each page is saved under the test's tmp folder; the paths are printed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent import feedback
from agent.store.log import EventLog
from tests.service.test_daemon import (  # noqa: F401 - daemons and sim_server are fixtures
    ROOT,
    daemons,
    env_for,
    sim_server,
    start_daemon,
    wait_for,
    write_config,
)

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
TOKEN = "browser-test-token-0123456789abcdef"

pytestmark = pytest.mark.slow


def _browser(profile: Path):  # type: ignore[no-untyped-def]
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # never let Selenium look for drivers on the network
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              f"--user-data-dir={profile}", "--window-size=1280,1600"):
        opts.add_argument(a)
    return webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))


def _context_hash(root: Path, cfg: Path, tick: int) -> str:
    r = subprocess.run([sys.executable, "-m", "agent.cli", "--config", str(cfg), "context", "--tick", str(tick),
                        "--json"], cwd=root, env=env_for(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return str(json.loads(r.stdout)["manifest"]["request_hash"])


@pytest.mark.skipif(not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)),
                    reason="Debian's chromium and chromium-driver are not installed (.ci/run installs them)")
def test_browser_overview_ack_and_time_travel_against_a_running_daemon(tmp_path, sim_server, daemons):  # noqa: F811
    """Open the overview of a running daemon, log in, ack an alert with a note (acked in the page and an
    alert.acked event in the log with the token's name), open time travel at tick 3 and find the request hash
    `fleet-agent context --tick 3 --json` prints, with "hash matches"; screenshot every page."""
    from selenium.webdriver.common.by import By

    cfg = write_config(tmp_path, sim_server.url, interval="2s")
    (tmp_path / "token").write_text(TOKEN + "\n", encoding="utf-8")
    os.chmod(tmp_path / "token", 0o600)
    with cfg.open("a", encoding="utf-8") as f:
        f.write(f"demand:\n  url: {sim_server.url}/demand\n"
                "http:\n  listen: 127.0.0.1:0\n  token_file: ./token\n  token_name: web-ops\n")
    db = tmp_path / "data" / "fleet-agent.db"
    with EventLog(db) as lg:
        alert_id, _new = feedback.raise_alert(lg, key="browser:1", severity="critical",
                                              title="host <b>4417</b> keeps failing", raised_by="operator")
    d = start_daemon(tmp_path, cfg)
    daemons.append(d)
    m = wait_for(lambda: re.search(r'"url": "(http://127\.0\.0\.1:\d+)"', d.stderr()), "the console's URL", timeout=90)
    url = m.group(1)
    wait_for(lambda: len(d.kinds("tick.completed")) >= 3, "three ticks", timeout=90)

    shots = tmp_path / "screenshots"
    shots.mkdir()
    saved: list[Path] = []
    browser = _browser(tmp_path / "chromium-profile")
    try:
        def shot(name: str) -> None:
            p = shots / f"{name}.png"
            browser.save_screenshot(str(p))
            saved.append(p)

        browser.get(url + "/")
        assert "Overview" in browser.title or "overview" in browser.title
        assert "Fleet" in browser.find_element(By.ID, "fleet-section").text
        assert "host <b>4417</b> keeps failing" in browser.find_element(By.ID, "open-alerts").text
        shot("overview")

        browser.get(url + "/login")
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        browser.find_element(By.ID, "login").click()
        wait_for(lambda: "acting as web-ops" in browser.page_source, "the login")

        browser.get(f"{url}/alerts/{alert_id}")
        browser.find_element(By.ID, "ack-note").send_keys("host replaced by the datacenter")
        shot("alert-before-ack")
        browser.find_element(By.ID, "ack").click()
        wait_for(lambda: browser.find_elements(By.ID, "acked-by"), "the acked page")
        assert browser.find_element(By.ID, "alert-status").text == "acked"
        assert "web-ops: host replaced by the datacenter" in browser.find_element(By.ID, "acked-by").text
        shot("alert-acked")
        acks = [e for e in d.kinds("alert.acked") if e.payload["alert_id"] == alert_id]
        assert len(acks) == 1 and acks[0].payload["by"] == "web-ops"
        assert acks[0].payload["note"] == "host replaced by the datacenter"

        browser.get(url + "/alerts")
        shot("alerts")
        browser.get(url + "/thread")
        shot("thread")
        browser.get(url + "/knowledge")
        shot("knowledge")

        expected = _context_hash(tmp_path, cfg, 3)
        browser.get(url + "/travel?tick=3")
        assert browser.find_element(By.ID, "request-hash").text == expected
        assert browser.find_element(By.ID, "hash-match").text == "hash matches"
        shot("time-travel-tick-3")
        browser.get(f"{url}/travel/diff?a=5&b={d.log.last_seq()}")
        shot("time-travel-diff")
        browser.get(url + "/healthz")
        assert "ok" in browser.find_element(By.TAG_NAME, "body").text
    finally:
        browser.quit()
    for p in saved:
        assert p.stat().st_size > 1000
        print(f"screenshot: {p}")
    keep = os.environ.get("FLEET_AGENT_SCREENSHOTS")
    if keep:  # a reviewer's copy, outside pytest's rotating tmp folders
        Path(keep).mkdir(parents=True, exist_ok=True)
        for p in saved:
            shutil.copy(p, Path(keep) / p.name)
    assert d.stop() == 0
    time.sleep(0)  # the daemon has stopped; its HTTP thread stopped with it
    assert ROOT.exists()
