"""Token counts kept across processes (``agent.context.cache.CountFile``).

A fresh process reads the counts an earlier one kept instead of loading the tokenizer and counting again,
and gets the very request a process that counted everything gets. A damaged, torn, forged-to-impossible
or foreign file is never trusted: its records are counted again.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from agent.context import ProjectionCache, project
from agent.context.cache import MAGIC, RECORD, CountFile, _check
from agent.context.load import meter_for, tokenizer_for
from agent.tokens import get_tokenizer
from tests.cli.test_cli_context import TICKS
from tests.context.test_context import TOOLS
from tests.context.test_context_props import S
from tests.context.test_replay_inputs import Summariser, drive, make_app

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
from agent.context import ProjectionCache, project
from agent.context.cache import CountFile
from agent.context.prompts import load_prompts
from agent.store.log import EventLog
from tests.context.test_context_props import S
a = json.loads(open(sys.argv[1]).read())
log = EventLog(a["db"], readonly=True, create=False)
p = project(log, load_prompts(a["prompts"]), S, policy=a["policy"], tools=a["tools"], model="m",
            cache=ProjectionCache(counts=CountFile(a["counts"])))
print(json.dumps({"hash": p.request_hash, "tokens": p.tokens, "tiktoken": "tiktoken" in sys.modules}))
"""


def _logged(tmp_path: Path) -> Any:
    app = make_app(tmp_path)
    drive(app, TICKS[:8], Summariser())
    return app


def _reference(app: Any) -> Any:
    """The request as a process that counts every text itself makes it."""
    return project(app.log, app.prompts, S, policy=app.policy, tools=TOOLS, model="m", cache=ProjectionCache())


def _with_file(app: Any, path: Path) -> tuple[Any, CountFile]:
    counts = CountFile(path)
    return project(app.log, app.prompts, S, policy=app.policy, tools=TOOLS, model="m",
                   cache=ProjectionCache(counts=counts)), counts


def test_a_fresh_process_projects_from_kept_counts_without_loading_the_tokenizer(tmp_path: Path) -> None:
    app = _logged(tmp_path)
    counts = tmp_path / "token-counts"
    first, _ = _with_file(app, counts)
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"db": str(tmp_path / "fleet.db"), "prompts": str(app.prompts_dir),
                                "policy": app.policy, "tools": TOOLS, "counts": str(counts),
                                "settings": dataclasses.asdict(S)}))
    out = subprocess.run([sys.executable, "-c", CHILD, str(args)], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    child = json.loads(out.strip().splitlines()[-1])
    ref = _reference(app)
    assert child == {"hash": ref.request_hash, "tokens": ref.tokens, "tiktoken": False}
    assert first.request_hash == ref.request_hash and first.tokens == ref.tokens


def _records(path: Path) -> list[tuple[bytes, int, int, bytes]]:
    data = path.read_bytes()
    assert data.startswith(MAGIC)
    return list(RECORD.iter_unpack(data[len(MAGIC):]))


def _write(path: Path, records: list[tuple[bytes, int, int, bytes]], tail: bytes = b"") -> None:
    path.write_bytes(MAGIC + b"".join(RECORD.pack(*r) for r in records) + tail)


def test_damaged_and_impossible_counts_are_counted_again(tmp_path: Path) -> None:
    """Every record changed after it was written (a flipped count: the check fails; an impossible count
    with a check made for it; a length that is not the text's) is refused, the request is the one counted
    from scratch, and the file is rewritten with sound records only."""
    app = _logged(tmp_path)
    path = tmp_path / "token-counts"
    _with_file(app, path)
    good = _records(path)
    assert len(good) > 10
    ref = _reference(app)
    damaged = {
        "flipped": [(d, n + 1, size, check) for d, n, size, check in good],
        "impossible": [(d, size + 1, size, _check(d, size + 1, size)) for d, _, size, _ in good],
        "wrong length": [(d, n, size + 1, _check(d, n, size + 1)) for d, n, size, _ in good],
    }
    for what, records in damaged.items():
        _write(path, records)
        p, counts = _with_file(app, path)
        assert (p.request_hash, p.tokens) == (ref.request_hash, ref.tokens), what
        assert counts.rejected > 0, what
        p, again = _with_file(app, path)   # the damaged file was rewritten with sound records only
        assert (p.request_hash, p.tokens, again.rejected) == (ref.request_hash, ref.tokens, 0), what


def test_a_torn_or_foreign_file_is_not_trusted_and_is_replaced(tmp_path: Path) -> None:
    app = _logged(tmp_path)
    path = tmp_path / "token-counts"
    _with_file(app, path)
    good = _records(path)
    ref = _reference(app)
    _write(path, good, tail=RECORD.pack(*good[0])[:13])   # a record torn by a crash
    p, counts = _with_file(app, path)
    assert (p.request_hash, p.tokens, counts.rejected) == (ref.request_hash, ref.tokens, 0)
    tok = get_tokenizer()
    ProjectionCache(counts=CountFile(path)).count(tok, "a text counted after the crash")
    assert path.stat().st_size % RECORD.size == 0   # rewritten whole before the next record
    assert CountFile(path).get(tok.key, "a text counted after the crash") == tok.count("a text counted after the crash")
    path.write_bytes(b"\x00not a count file" * 100)
    p, counts = _with_file(app, path)
    assert (p.request_hash, p.tokens) == (ref.request_hash, ref.tokens) and counts.rejected == 1
    assert path.read_bytes().startswith(MAGIC)   # rewritten at the first count kept


def test_the_file_keeps_its_newest_records_within_its_size(tmp_path: Path) -> None:
    tok = get_tokenizer()
    path = tmp_path / "token-counts"
    cache = ProjectionCache(counts=CountFile(path, max_records=8))
    texts = [f"text number {i} " * (i + 1) for i in range(30)]
    for t in texts:
        cache.count(tok, t)
    assert len(_records(path)) <= 8
    fresh = CountFile(path, max_records=8)
    kept = [t for t in texts if fresh.get(tok.key, t) is not None]
    assert kept and kept == texts[-len(kept):]
    assert all(fresh.get(tok.key, t) == tok.count(t) for t in kept)


def _no_tokenizer() -> Any:
    raise AssertionError("the tokenizer was loaded")


def test_cut_texts_are_kept_too(tmp_path: Path) -> None:
    """A text cut to a cap is cut the same from kept counts as by the tokenizer, and a fresh process cuts
    it again without the tokenizer (a cut that falls inside a character is recomputed)."""
    tok = tokenizer_for(S)
    path = tmp_path / "token-counts"
    texts = ["gpu RTX_4090 offer 31337 ok " * 200, "données — 東京 ✓ " * 150, "🙂" * 500]
    caps = (1, 7, 100, 333)
    meter = meter_for(S, ProjectionCache(counts=CountFile(path)))
    assert [meter.cut(t, c) for t in texts for c in caps] == [tok.cut(t, c) for t in texts for c in caps]
    again = ProjectionCache(counts=CountFile(path)).meter(_no_tokenizer, meter.key)
    assert [again.cut(texts[0], c) for c in caps] == [tok.cut(texts[0], c) for c in caps]
    loading = ProjectionCache(counts=CountFile(path)).meter(lambda: tok, meter.key)
    assert [loading.cut(t, c) for t in texts for c in caps] == [tok.cut(t, c) for t in texts for c in caps]


def test_importing_the_projection_does_not_load_tiktoken() -> None:
    code = "import sys, agent.context, agent.context.compaction, agent.store.log; print('tiktoken' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_an_encoding_file_parses_as_line_by_line_and_names_a_damaged_line(tmp_path: Path) -> None:
    import hashlib
    from importlib import resources

    import pytest

    from agent.errors import ConfigError
    from agent.tokens import KNOWN, _parse_bpe, _parse_bpe_lines

    package, rel = KNOWN["cl100k_base"][:2]
    data = resources.files(package).joinpath(rel).read_bytes()
    assert _parse_bpe(data, "f") == _parse_bpe_lines(data, "f")
    assert _parse_bpe(data.replace(b"\n", b"\n\n", 3), "f") == _parse_bpe_lines(data, "f")   # blank lines
    for bad, line in ((data.replace(b" 5\n", b" x\n", 1), 6), (data.replace(b" 5\n", b"\n", 1), 6),
                      (data + b"abc 1 2\n", 100257)):
        path = tmp_path / "bad.tiktoken"
        path.write_bytes(bad)
        with pytest.raises(ConfigError, match=rf"bad.tiktoken:{line}: not a tiktoken BPE line"):
            get_tokenizer("cl100k_base", str(path), hashlib.sha256(bad).hexdigest())
