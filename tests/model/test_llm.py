"""The model client, through the real openai SDK, against the scripted fake server on 127.0.0.1."""

from __future__ import annotations

import json
import re

import pytest
from structlog.testing import capture_logs

from agent.errors import FleetAgentError
from agent.model.llm import LLMError, ModelReply, OpenAIChat, ToolCall, Usage, call_with_retries
from tests.fakes.openai_server import (
    FakeOpenAI,
    context_length_error,
    empty_choices,
    error,
    hang,
    raw,
    reply,
)

SECRET = "sk-test-0123456789abcdefSECRET"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "rent_offer",
            "description": "Rent one offer.",
            "parameters": {"type": "object", "properties": {"offer_id": {"type": "integer"}}},
        },
    }
]


def _messages() -> list[dict]:
    return [
        {"role": "system", "content": "You run a GPU fleet."},
        {"role": "user", "content": "[tick 1] 3 instances running, 12 proofs pending. Zürich → ok"},
    ]


def _wire(messages: list[dict]) -> bytes:
    """The SDK's compact JSON serialisation of a messages list."""
    return json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode()


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


def _client(fake: FakeOpenAI, **kw) -> OpenAIChat:
    kw.setdefault("api_key", None)
    kw.setdefault("max_retries", 0)
    return OpenAIChat(base_url=fake.base_url, model="fake-model", **kw)


def test_text_reply(fake):
    """A plain text completion becomes a ModelReply with the text, no tool calls, the finish reason and model."""
    fake.enqueue(reply("All good, nothing to do."))
    client = _client(fake)
    out = client.complete(_messages(), TOOLS)
    assert out.text == "All good, nothing to do."
    assert out.tool_calls == ()
    assert out.finish_reason == "stop"
    assert out.model == "fake-model"
    assert client.name == "openai:fake-model"


def test_latency_covers_the_time_the_server_took(fake):
    """latency_ms measures the whole call: a server that stalls 300 ms before a good answer gives
    a reply whose latency is at least that (a lower bound only, with 1 ms for timer granularity and
    rounding: a busy machine may take any amount longer)."""
    fake.enqueue(hang(0.3, then=reply("late but fine")))
    out = _client(fake, timeout=30.0).complete(_messages(), TOOLS)
    assert out.text == "late but fine"
    assert out.latency_ms >= 299.0


def test_several_tool_calls_keep_raw_arguments(fake):
    """Several tool calls in one reply are all returned, in order, with argument strings exactly as sent."""
    fake.enqueue(
        reply(
            text="Renting two.",
            tool_calls=[
                ("rent_offer", '{"offer_id": 12,'),  # malformed JSON, kept verbatim
                ("rent_offer", '{ "offer_id" : 13 }'),
                ("get_balance", {}),
            ],
        )
    )
    out = _client(fake).complete(_messages(), TOOLS)
    assert out.text == "Renting two."
    assert [c.name for c in out.tool_calls] == ["rent_offer", "rent_offer", "get_balance"]
    assert [c.arguments for c in out.tool_calls] == ['{"offer_id": 12,', '{ "offer_id" : 13 }', "{}"]
    assert len({c.id for c in out.tool_calls}) == 3
    assert out.finish_reason == "tool_calls"


def test_reply_with_neither_text_nor_tool_calls(fake):
    """A completion with null content and no tool calls is a valid reply with empty text."""
    fake.enqueue(reply("", finish_reason="length"))
    out = _client(fake).complete(_messages(), [])
    assert out.text == ""
    assert out.tool_calls == ()
    assert out.finish_reason == "length"


def test_usage_reports_prompt_completion_and_cached_tokens(fake):
    """Usage carries prompt/completion tokens and the provider's cached_tokens; a prefix-extended request is cached."""
    client = _client(fake)
    first = client.complete(_messages(), TOOLS)
    assert first.usage.cached_tokens == 0
    assert first.usage.prompt_tokens == len(fake.chat_requests[0].raw) // 4
    assert first.usage.completion_tokens > 0

    longer = _messages() + [
        {"role": "assistant", "content": "nothing to do"},
        {"role": "user", "content": "[tick 2]"},
    ]
    second = client.complete(longer, TOOLS)
    prefix = len(_wire(_messages())) - 1  # everything up to the closing bracket is shared
    assert second.usage.cached_tokens == prefix // 4
    assert second.usage.prompt_tokens == len(fake.chat_requests[1].raw) // 4


def test_usage_without_details_reports_zero_cached(fake):
    """A server that reports no prompt_tokens_details gives cached_tokens 0."""
    fake.enqueue(
        raw(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "other-model",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13},
            }
        )
    )
    out = _client(fake).complete(_messages(), [])
    assert out.usage == Usage(prompt_tokens=11, completion_tokens=2, cached_tokens=0)
    assert out.model == "other-model"


def test_server_error_without_retries(fake):
    """A 500 with max_retries=0 raises LLMError kind 'server', retryable, after exactly one request."""
    fake.enqueue(error(500), reply("unused"))
    with pytest.raises(LLMError) as info:
        _client(fake, max_retries=0).complete(_messages(), TOOLS)
    assert info.value.kind == "server"
    assert info.value.retryable is True
    assert info.value.status == 500
    assert isinstance(info.value, FleetAgentError)
    assert len(fake.chat_requests) == 1


def test_server_error_recovers_on_fleet_agents_own_retry(fake):
    """With max_retries=1 a 503 followed by a good reply returns the good reply: the retry is
    fleet-agent's own (reported to on_retry with the server's retry-after wait), the same bytes are sent
    again, and the SDK itself never retries (complete() alone makes one request)."""
    fake.enqueue(error(503, "upstream down"), reply("second try"))
    client = _client(fake, max_retries=1)
    seen: list[tuple[int, str, float]] = []
    out = call_with_retries(client, _messages(), TOOLS, on_retry=lambda n, e, w: seen.append((n, e.kind, w)),
                            wait=lambda s: True)
    assert out.text == "second try"
    assert seen == [(1, "server", 0.005)]
    assert len(fake.chat_requests) == 2
    assert fake.chat_requests[0].raw == fake.chat_requests[1].raw
    fake.enqueue(error(500))
    with pytest.raises(LLMError):
        client.complete(_messages(), TOOLS)
    assert len(fake.chat_requests) == 3


def test_a_timed_out_request_is_not_sent_again_unless_configured(fake):
    """A request the client gave up on is not re-sent (the server may still be computing it) even with
    max_retries=1; with retry_timeouts it is, and the error says the timeout, the attempts and the time."""
    fake.enqueue(hang(2.0))  # a re-send would get the default reply and not raise
    with pytest.raises(LLMError) as info:
        call_with_retries(_client(fake, timeout=0.3, max_retries=1), _messages(), TOOLS,
                          on_retry=lambda *a: None, wait=lambda s: True)
    assert info.value.kind == "timeout"
    assert re.search(r": no reply within 0.3 s, 1 attempt, \d+ s$", str(info.value)), str(info.value)
    assert len(fake.chat_requests) == 1

    fake.enqueue(hang(2.0), hang(2.0))
    retried: list[int] = []
    with pytest.raises(LLMError) as info:
        call_with_retries(_client(fake, timeout=0.3, max_retries=1, retry_timeouts=True), _messages(), TOOLS,
                          on_retry=lambda n, e, w: retried.append(n), wait=lambda s: True)
    assert re.search(r": no reply within 0.3 s, 2 attempts, \d+ s$", str(info.value)), str(info.value)
    assert retried == [1]
    assert len(fake.chat_requests) == 3


def test_a_reply_without_usage_counts_zero(fake):
    """A server that sends no `usage` (some local servers) gives a reply with zero counts, not an error."""
    fake.report_usage = False
    fake.enqueue(reply("fine"))
    out = _client(fake).complete(_messages(), TOOLS)
    assert out.text == "fine"
    assert out.usage == Usage()


def test_rate_limit(fake):
    """A 429 raises LLMError kind 'rate_limit', retryable."""
    fake.enqueue(error(429, {"error": {"message": "slow down", "type": "rate_limit"}}))
    with pytest.raises(LLMError) as info:
        _client(fake).complete(_messages(), TOOLS)
    assert (info.value.kind, info.value.retryable) == ("rate_limit", True)
    assert "slow down" in str(info.value)


def test_hang_times_out(fake):
    """A server slower than the client's timeout raises LLMError kind 'timeout'."""
    fake.enqueue(hang(2.0))
    with pytest.raises(LLMError) as info:
        _client(fake, timeout=0.5).complete(_messages(), TOOLS)
    assert info.value.kind == "timeout"
    assert info.value.retryable is True


def test_connection_refused():
    """Nothing listening at base_url raises LLMError kind 'connection'."""
    with FakeOpenAI() as gone:
        url = gone.base_url
    client = OpenAIChat(base_url=url, model="m", api_key=None, max_retries=0, timeout=2)
    with pytest.raises(LLMError) as info:
        client.complete(_messages(), [])
    assert info.value.kind == "connection"


def test_context_length_openai_shape(fake):
    """OpenAI's 400 context_length_exceeded raises kind 'context_length', not retryable as is."""
    fake.enqueue(context_length_error())
    with pytest.raises(LLMError) as info:
        _client(fake).complete(_messages(), TOOLS)
    assert info.value.kind == "context_length"
    assert info.value.retryable is False
    assert info.value.status == 400


@pytest.mark.parametrize(
    "body",
    [
        # vLLM
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        # Ollama's OpenAI-compatible endpoint
        {"error": {"message": "input length exceeds the context length", "type": "invalid_request_error"}},
        # plain text
        "Too many tokens in prompt",
    ],
    ids=["vllm", "ollama", "text"],
)
def test_context_length_other_servers(fake, body):
    """vLLM, Ollama and plain-text variants of 'prompt too long' are all kind 'context_length'."""
    fake.enqueue(error(400, body))
    with pytest.raises(LLMError) as info:
        _client(fake).complete(_messages(), TOOLS)
    assert info.value.kind == "context_length"


def test_other_400_is_bad_request(fake):
    """A 400 that is not about context length is kind 'bad_request', not retryable."""
    fake.enqueue(
        error(
            400, {"error": {"message": "tools[0].function.name is invalid", "type": "invalid_request_error"}}
        )
    )
    with pytest.raises(LLMError) as info:
        _client(fake).complete(_messages(), TOOLS)
    assert (info.value.kind, info.value.retryable) == ("bad_request", False)
    assert "tools[0].function.name is invalid" in str(info.value)


def test_empty_choices(fake):
    """A 200 with an empty choices list raises kind 'empty'."""
    fake.enqueue(empty_choices())
    with pytest.raises(LLMError) as info:
        _client(fake).complete(_messages(), TOOLS)
    assert info.value.kind == "empty"


@pytest.mark.parametrize(
    "body", [b"<html>gateway</html>", {"id": "x", "object": "chat.completion"}], ids=["html", "no-choices"]
)
def test_malformed_body(fake, body):
    """A 200 whose body is not a chat completion raises kind 'malformed'."""
    fake.enqueue(raw(body))
    with pytest.raises(LLMError) as info:
        _client(fake).complete(_messages(), TOOLS)
    assert info.value.kind == "malformed"


def test_auth_failure_never_shows_the_key():
    """A wrong key gives kind 'auth'; the key is in no error message, repr or log line."""
    with FakeOpenAI(api_key="the-right-key") as server:
        client = OpenAIChat(base_url=server.base_url, model="fake-model", api_key=SECRET, max_retries=0)
        with capture_logs() as logs, pytest.raises(LLMError) as info:
            client.complete(_messages(), TOOLS)
        assert info.value.kind == "auth"
        assert info.value.retryable is False
        for text in (str(info.value), repr(info.value), repr(client), json.dumps(logs, default=str)):
            assert SECRET not in text
        recorded = server.chat_requests[0]
        assert recorded.auth_ok is False
        assert recorded.headers["authorization"] == "Bearer <redacted>"


def test_echoed_key_is_scrubbed(fake):
    """If a server echoes the key in its error body, the LLMError message has it redacted."""
    fake.enqueue(error(400, {"error": {"message": f"bad key {SECRET} for this project"}}))
    client = _client(fake, api_key=SECRET)
    with pytest.raises(LLMError) as info:
        client.complete(_messages(), TOOLS)
    assert SECRET not in str(info.value)
    assert "<redacted>" in str(info.value)


def test_right_key_is_sent(fake):
    """The configured key is sent as a Bearer token; without a key a placeholder is sent."""
    with FakeOpenAI(api_key=SECRET) as server:
        out = OpenAIChat(base_url=server.base_url, model="fake-model", api_key=SECRET).complete(
            _messages(), []
        )
        assert out.text == "nothing to do"
        assert server.requests[0].auth_ok is True
        assert SECRET not in repr(server.requests[0])


def test_list_models():
    """list_models returns the ids the server lists."""
    with FakeOpenAI(models=("qwen2.5-32b", "llama-3.1-8b")) as server:
        client = OpenAIChat(base_url=server.base_url, model="qwen2.5-32b", api_key=None)
        assert client.list_models() == ["qwen2.5-32b", "llama-3.1-8b"]


def test_request_is_exactly_what_was_given(fake):
    """The request carries the given messages and tools unchanged, the model, and the sampling settings."""
    messages = _messages() + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [ToolCall("call_1", "rent_offer", '{"offer_id": 12,').to_message()],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "error: arguments are not valid JSON"},
    ]
    client = _client(fake, temperature=0.0, max_tokens=512)
    client.complete(messages, TOOLS)
    body = fake.chat_requests[0].json
    assert body["messages"] == messages
    assert list(body["messages"][2]) == list(messages[2])  # key order kept
    assert body["tools"] == TOOLS
    assert body["tool_choice"] == "auto"
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("fake-model", 0.0, 512)
    assert _wire(messages) in fake.chat_requests[0].raw


@pytest.mark.parametrize("tools", [TOOLS, []], ids=["tools", "no-tools"])
def test_lists_sent_as_extra_body_are_the_same_bytes_as_through_the_typed_params(fake, tools):
    """Messages and tools travel as extra_body (skipping the SDK's per-message transformation): the server
    receives, byte for byte, the body the SDK's typed parameters send, headers' content type included."""
    messages = _messages() + [
        {"role": "assistant", "content": None,
         "tool_calls": [ToolCall("call_1", "rent_offer", '{"offer_id": 12}').to_message()]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rented #4242 at $0.41/h — ok"},
        {"role": "assistant", "content": "done", "name": "fleet"},
    ]
    _client(fake, typed_lists=True).complete(messages, tools)
    _client(fake).complete(messages, tools)
    typed, plain = fake.chat_requests
    assert plain.raw == typed.raw
    assert plain.headers["content-type"] == typed.headers["content-type"] == "application/json"
    assert ("tools" in plain.json) == bool(tools)


def test_no_tools_means_no_tools_field(fake):
    """With no tools, neither tools nor tool_choice is sent."""
    _client(fake).complete(_messages(), [])
    body = fake.chat_requests[0].json
    assert "tools" not in body and "tool_choice" not in body


def test_requests_are_deterministic_and_prefix_extend(fake):
    """Same messages give byte-identical requests; an extended list gives a byte-prefix-extended messages array."""
    client = _client(fake)
    first = _messages()
    client.complete(first, TOOLS)
    client.complete(first, TOOLS)
    longer = first + [
        {"role": "assistant", "content": "nothing to do"},
        {"role": "user", "content": "[tick 2] ✓"},
    ]
    client.complete(longer, TOOLS)
    r1, r2, r3 = (r.raw for r in fake.chat_requests)
    assert r1 == r2
    m1, m3 = _wire(first), _wire(longer)
    assert m1 in r1 and m3 in r3
    assert m3.startswith(m1[:-1])


def test_callable_step_sees_the_request(fake):
    """A callable step is given the request JSON and its reply is served."""
    fake.enqueue(lambda request: reply(f"saw {len(request['messages'])} messages"))
    out = _client(fake).complete(_messages(), TOOLS)
    assert out.text == "saw 2 messages"
    assert fake.pending == 0


def test_payload_round_trip(fake):
    """to_payload is JSON-able and from_payload restores an equal ModelReply."""
    fake.enqueue(reply("two calls", tool_calls=[("a", {"x": 1}), ("b", "{bad")]))
    out = _client(fake).complete(_messages(), TOOLS)
    payload = json.loads(json.dumps(out.to_payload()))
    assert ModelReply.from_payload(payload) == out


@pytest.mark.parametrize("style", ["vllm", "llama.cpp"])
def test_a_request_past_the_servers_window_names_the_window(fake, style):
    """A server whose window is smaller than prompt + max_tokens refuses the request with its own error
    shape (vLLM's "maximum context length is N tokens", llama.cpp's exceed_context_size_error with n_ctx);
    both are kind 'context_length' and carry the window the server named."""
    fake.context_window = 300
    fake.window_style = style
    with pytest.raises(LLMError) as info:
        _client(fake, max_tokens=200).complete([{"role": "user", "content": "x" * 800}], [])
    assert info.value.kind == "context_length" and info.value.window == 300
    assert len(fake.chat_requests) == 1
