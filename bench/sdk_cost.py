"""CPU per model request spent in the openai SDK, before and after sending the lists as ``extra_body``.

    python bench/sdk_cost.py              # 40 requests per way, ~30k-token context
    python bench/sdk_cost.py --requests 100 --tokens 60000

A request shaped like a late tick's (the installed tools' schemas, a system prompt, ticks of observations,
tool calls and results, ~30k tokens by tiktoken's cl100k_base) is sent through ``OpenAIChat.complete`` to
the fake OpenAI-compatible server (tests/fakes) on 127.0.0.1, once with the messages and tools passed as
the SDK's typed parameters (``typed_lists=True``: the SDK walks them against its TypedDicts) and once as
``extra_body`` (the default). The client thread's CPU time (``time.thread_time``: the server runs in
another thread and is not counted) is measured per request, the two ways interleaved in rounds. The parts
are timed alone too: the SDK's ``maybe_transform`` of the typed parameters, and the JSON dump of the body.
The bytes the server received are compared: they must be the same both ways.

Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import structlog  # noqa: E402

from agent.fleet.toolkit import load_tools  # noqa: E402
from agent.model.llm import OpenAIChat  # noqa: E402
from agent.tokens import get_tokenizer  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402


def context(tokens: int) -> list[dict[str, Any]]:
    """Messages shaped like a late tick's request, about ``tokens`` tokens long."""
    tok = get_tokenizer()
    msgs: list[dict[str, Any]] = [{"role": "system", "content": (
        "You run a fleet of rented GPU instances for a proving queue. Keep the queue drained at the lowest "
        "cost the policy allows; explain every rent and destroy. ") * 40}]
    n = 0
    while tok.count_messages(msgs) < tokens:
        n += 1
        obs = {"time": 1_795_000_000 + n * 300, "balance": 812.5 - n,
               "instances": [{"id": 31_000_000 + i, "gpu_name": "RTX 4090", "num_gpus": 1, "status": "running",
                              "dph": round(0.35 + i / 97, 4), "host_id": 4000 + i, "jobs": 40 * n + i}
                             for i in range(10)],
               "demand": {"pending": 30 + n % 7, "running": 10, "completed": 400 * n}}
        msgs.append({"role": "user", "content": f"[tick {n} · observation] " + json.dumps(obs)})
        args = json.dumps({"gpu": "RTX 4090", "max_dph": 0.6, "limit": 10})
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{n}_0", "type": "function", "function": {"name": "search_offers", "arguments": args}}]})
        rows = "\n".join(f"offer {9_000_000 + n * 10 + j} · RTX 4090 · host {5000 + j} · $0.{40 + j}/h · "
                         f"reliability 0.99{j} · inet 800 Mb/s" for j in range(10))
        msgs.append({"role": "tool", "tool_call_id": f"call_{n}_0", "content": rows})
        msgs.append({"role": "assistant", "content": f"Tick {n}: queue steady, fleet holds; no offer beats the "
                     "current hosts. \u2014 next look in 5 minutes."})
    return msgs


def cpu_ms(chat: OpenAIChat, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> float:
    t0 = time.thread_time()
    chat.complete(messages, tools)
    return (time.thread_time() - t0) * 1000


def parts_ms(chat: OpenAIChat, messages: list[dict[str, Any]], tools: list[dict[str, Any]], n: int) -> dict[str, float]:
    """The SDK's transformation of the typed parameters, and the JSON dump of the body, each alone."""
    from openai._utils import maybe_transform
    from openai._utils._json import openapi_dumps
    from openai.types.chat import completion_create_params

    params = chat.request_params(messages, tools)
    out: dict[str, list[float]] = {"transform": [], "json_dump": []}
    for _ in range(n):
        t0 = time.thread_time()
        body = maybe_transform(params, completion_create_params.CompletionCreateParamsNonStreaming)
        t1 = time.thread_time()
        openapi_dumps(body)
        t2 = time.thread_time()
        out["transform"].append((t1 - t0) * 1000)
        out["json_dump"].append((t2 - t1) * 1000)
    return {k: round(statistics.median(v), 2) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=40, help="requests per way (default 40)")
    ap.add_argument("--tokens", type=int, default=30_000, help="the context's size in tokens (default 30000)")
    a = ap.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    tools = load_tools().specs()
    messages = context(a.tokens)
    with FakeOpenAI() as fake:
        ways = {"before": OpenAIChat(base_url=fake.base_url, model="m", api_key=None, typed_lists=True),
                "after": OpenAIChat(base_url=fake.base_url, model="m", api_key=None)}
        sent: dict[str, bytes] = {}
        for name, chat in ways.items():  # warm both (imports, connection, the SDK's caches)
            for _ in range(3):
                chat.complete(messages, tools)
            sent[name] = fake.chat_requests[-1].raw
        times: dict[str, list[float]] = {k: [] for k in ways}
        rounds = 4
        for _ in range(rounds):
            for name, chat in ways.items():
                times[name] += [cpu_ms(chat, messages, tools) for _ in range(max(1, a.requests // rounds))]
        parts = parts_ms(ways["before"], messages, tools, 10)
    before, after = statistics.median(times["before"]), statistics.median(times["after"])
    print(json.dumps({
        "context_tokens": get_tokenizer().count_messages(messages) + get_tokenizer().count_tools(tools),
        "messages": len(messages), "tools": len(tools), "request_bytes": len(sent["after"]),
        "requests_per_way": len(times["after"]),
        "cpu_ms_per_request": {"before": round(before, 2), "after": round(after, 2),
                               "before_p90": round(sorted(times["before"])[int(0.9 * len(times["before"]))], 2),
                               "after_p90": round(sorted(times["after"])[int(0.9 * len(times["after"]))], 2)},
        "saved_ms_per_request": round(before - after, 2),
        "parts_ms": parts,
        "same_bytes": sent["before"] == sent["after"],
    }, indent=2))


if __name__ == "__main__":
    main()
