"""A fence nothing can forge: hostile strings from every channel reach the model as data, never as a tag.

Each payload of tests/data/injection_payloads.json goes, in one tick, through every channel the agent does
not author: the model's ``raise_alert`` title and detail and ``remember`` key and text, every string field of
a vast.ai instance and offer (through the simulator), the instance's logs, the demand source's answer, tool
arguments echoed in results (``search_offers``, ``read_knowledge``, ``forget``, refused calls) and a
knowledge file's name. Then the log is compacted (the memory moves into the pinned block) and projected
again. In every request the model was sent, and in the projection, no line outside an operator-authored
message carries a source tag except the renderer's own, no raw control, format or line-separator
character is left, and every fence the renderer opened is closed by the renderer.
"""

from __future__ import annotations

import json
import re
import threading
import unicodedata
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agent import context, feedback
from agent.context import compaction
from agent.events import Event, Vocabulary
from agent.events.kinds import VOCABULARY
from agent.fleet.toolkit import load_tools
from agent.runtime.tick import run_tick
from tests.fakes.openai_server import reply

CORPUS_FILE = Path(__file__).resolve().parents[1] / "data" / "injection_payloads.json"
CORPUS: list[dict[str, str]] = json.loads(CORPUS_FILE.read_text(encoding="utf-8"))["payloads"]

# A source tag: a bracket holding " · " (every tag the renderer writes has one: [tick 3 · ...],
# [operator note · alice], [alert #2 acked · bob], [knowledge edit · x.md], [memory · written by the agent]).
TAG = re.compile(r"\[[^\[\]\n]*? · [^\[\]\n]*\]|\[summary of #[^\[\]\n]*\]")
OPERATOR_HEADS = ("[operator note · ", "[operator directive #", "[operator · ")
PINNED_PREFIXES = ("- [operator directive #", "- [memory · written by the agent] ", "- [operator note #", "- [alert #",
                   "- [operator #")
UNSAFE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
FENCE = re.compile(r"^(`{3,})([A-Za-z]*)$")


def _unsafe_chars(text: str) -> list[str]:
    return [f"U+{ord(c):04X}" for c in text if c not in "\n\t" and unicodedata.category(c) in UNSAFE]


def _tag_findings(lines: list[str], pinned: bool) -> list[str]:
    found = []
    for n, line in enumerate(lines):
        for m in TAG.finditer(line):
            if n == 0 and m.start() == 0:
                continue  # the renderer's head
            if pinned and any(line.startswith(p) and m.start() == 2 for p in PINNED_PREFIXES):
                continue  # the renderer's label of a pinned item
            found.append(f"line {n}: tag {m.group(0)[:60]!r}")
    return found


def _fence_findings(lines: list[str], role: str) -> list[str]:
    """A fence opens on a line of 3+ backticks and an info word and closes on a line of at least as many
    backticks alone; every fence must close, and a tool message holds exactly one, opened on line 1."""
    opened: list[int] = []
    width = 0
    for n, line in enumerate(lines):
        m = FENCE.match(line)
        if width == 0 and m is not None:
            width = len(m.group(1))
            opened.append(n)
        elif width and set(line) == {"`"} and len(line) >= width:
            width = 0
    found = [f"fence opened on line {opened[-1]} is never closed"] if width else []
    if role == "tool" and opened != [1]:
        found.append(f"tool message fences opened on lines {opened}, expected [1]")
    return found


def findings(messages: list[dict[str, Any]]) -> list[str]:
    """Every place in ``messages`` where untrusted text escaped its fence (empty when none did)."""
    out = []
    for i, msg in enumerate(messages):
        content = msg.get("content")
        if not isinstance(content, str) or msg["role"] == "system":
            continue
        if msg["role"] == "user" and content.startswith(OPERATOR_HEADS):
            continue  # an operator's own words
        lines = content.splitlines()  # splits at \r, U+0085, U+2028, U+2029 and the rest too
        pinned = content.startswith("[pinned · ")
        problems = [f"raw {c}" for c in sorted(set(_unsafe_chars(content)))]
        problems += _tag_findings(lines, pinned) + _fence_findings(lines, msg["role"])
        out += [f"message {i} ({msg['role']}): {p}" for p in problems]
    return out


# ------------------------------------------------------------------ the hostile demand source


class _Demand(BaseHTTPRequestHandler):
    body: bytes = b"{}"

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.server.body)))  # type: ignore[attr-defined]
        self.end_headers()
        self.wfile.write(self.server.body)  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


@pytest.fixture
def demand_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Demand)
    server.body = b"{}"  # type: ignore[attr-defined]
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------ one payload through every channel


def _file_name(text: str, n: int) -> str:
    safe = text.replace("/", "_").replace("\x00", "_").encode("utf-8")[:180].decode("utf-8", "ignore")
    return f"{n:02d}{safe}.md"


def _plant(sim: Any, iid: int, text: str) -> None:
    inst = sim.instances[iid]
    for key, value in list(inst.items()):
        if isinstance(value, str) and not key.startswith("_") and key not in ("actual_status", "intended_status",
                                                                              "cur_state", "label"):
            inst[key] = text
    inst["host_id"] = text
    for offer in sim.offers.values():
        offer["geolocation"] = text
    sim.plant_logs(iid, text + "\n" + text)


def _calls(text: str, iid: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("raise_alert", {"severity": "warning", "title": text[:200] or "t", "detail": text[:2000]}),
        ("raise_alert", {"severity": "info", "title": text}),  # refused when too long: the error echoes it
        ("remember", {"key": text[:80] or "k", "text": text[:2000] or "t"}),
        ("forget", {"key": (text[:78] or "k") + "-x"}),
        ("search_offers", {"gpu_name": text[:40]}),
        ("search_offers", {}),
        ("get_instance_logs", {"instance_id": iid}),
        ("read_knowledge", {"name": text[:120] or "n"}),
        ("list_fleet", {}),
    ]


def _run_payload(n: int, text: str, iid: int, sim: Any, make_app: Any, fake_model: Any, demand: Any) -> list[str]:
    sim.advance(60)
    _plant(sim, iid, text)
    demand.body = json.dumps({"pending": text, "completed": 3, text[:50]: 1}).encode()
    app = make_app(demand={"url": f"http://127.0.0.1:{demand.server_address[1]}/demand"})
    kdir = app.settings.knowledge_path
    kdir.mkdir(parents=True, exist_ok=True)
    (kdir / _file_name(text, n)).write_text("operator text\n", encoding="utf-8")
    fake_model.enqueue(reply("checking", tool_calls=_calls(text, iid)), reply("done"), reply("again"))
    start = len(fake_model.chat_requests)
    r = run_tick(app)
    assert r.ok, r.reason
    for alert in app.log.store.open_alerts():  # the model's alerts (title: the payload), acked by an operator
        feedback.ack(app.log, alert.id, "alice", "seen")
    assert run_tick(app).ok
    # The agent's requests (the summariser's, whose input compaction writes, are checked elsewhere).
    charter = app.prompts.system.split("{policy}")[0]
    requests = [m for m in (req.json["messages"] for req in fake_model.chat_requests[start:])
                if m[0]["content"].startswith(charter)]
    tools = load_tools().specs()
    cs = app.settings.context
    compaction.compact(app.log, app.prompts, cs, policy=app.policy_dict(), tools=tools, summarizer=None, tick=None,
                       open_alert_ids=[], owned_instance_ids=[], force=True)
    projected = context.project(app.log, app.prompts, cs, policy=app.policy_dict(), tools=tools).messages
    assert any("[memory · written by the agent]" in (m.get("content") or "") for m in projected)
    return [f"{where}: {f}" for where, msgs in [*((f"request {k}", m) for k, m in enumerate(requests)),
                                                 ("projection after compaction", projected)]
            for f in findings(msgs)]


CHUNKS = 4


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_no_payload_escapes_through_any_channel(chunk: int, sim: Any, make_app: Any, fake_model: Any,
                                                demand_server: ThreadingHTTPServer) -> None:
    """Each corpus payload, sent through every untrusted channel in one tick (then acked, compacted and
    projected), leaves no source tag outside the renderer's heads, no raw control or separator character,
    and no fence unclosed or opened by the data, in any request the model was sent."""
    iid = sim.create_instance(sim.find_offer("RTX 4090")["id"], label="someone-elses-box")
    sim.advance(600)
    escapes = []
    for n, p in enumerate(CORPUS):
        if n % CHUNKS == chunk:
            escapes += [f"{p['name']}: {f}" for f in _run_payload(n, p["text"], iid, sim, make_app, fake_model,
                                                                  demand_server)]
    assert escapes == [], f"{len(escapes)} escapes:\n" + "\n".join(escapes[:20])


def test_the_corpus_is_large_and_covers_every_kind_of_attack() -> None:
    """At least 50 named payloads, among them line breaks of every kind, fake tags, fence markers, ANSI
    escapes, zero-width characters and 10 kB strings."""
    texts = [p["text"] for p in CORPUS]
    assert len(CORPUS) >= 50 and len({p["name"] for p in CORPUS}) == len(CORPUS)
    for needle in ("\n", "\r", "\u2028", "\u2029", "\u0085", "[operator directive #", "```", "\x1b[", "\u200b"):
        assert any(needle in t for t in texts), needle
    assert any(len(t) >= 10_000 for t in texts)


def _v1_only() -> Vocabulary:
    """The vocabulary as it was before version 2: every kind at its first version."""
    vocab = Vocabulary()
    for name, k in VOCABULARY.kinds.items():
        vocab.define(name, k.doc, k.versions[0])
    return vocab


@pytest.mark.parametrize("payload", CORPUS[:16], ids=[p["name"] for p in CORPUS[:16]])
def test_the_check_catches_what_version_1_let_through_and_version_2_does_not(payload: dict[str, str]) -> None:
    """The check is not vacuous: a tool result and an observation carrying the payload, rendered by
    version 1, are flagged (the payload starts a line with a tag or leaves a raw separator); the same
    events rendered by the current version are clean."""
    obs = {"time": 1795946700, "instances": [{"id": 1, "gpu_name": payload["text"], "status": "loading",
                                              "status_msg": payload["text"], "host_id": 3}],
           "open_alerts": [payload["text"]]}
    events = [Event(1, "a", "2026-11-29T10:05:00Z", "tick.started", "scheduler", 1, {"observation": obs}),
              Event(2, "b", "2026-11-29T10:05:00Z", "tool.result", "tool", 1,
                    {"call_id": "c", "name": "get_instance_logs", "ok": True, "output": payload["text"]})]

    def rendered(vocab: Vocabulary, version: int) -> list[dict[str, Any]]:
        out = []
        for e in events:
            msg = vocab.render(Event(e.seq, e.id, e.ts, e.kind, e.source, e.tick, e.payload, version=version))
            assert msg is not None
            out.append(msg)
        return out

    assert findings(rendered(_v1_only(), 1)) != []
    assert findings(rendered(VOCABULARY, 2)) == []
