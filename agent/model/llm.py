"""The model client: one OpenAI-compatible chat call in, one `ModelReply` out.

`OpenAIChat` talks to any OpenAI-compatible server (vLLM, Ollama, OpenAI) through
the `openai` SDK. It sends exactly the messages it is given, nothing added, so a
request that extends the previous one is a byte prefix extension and providers'
prompt caches hit. Tool-call arguments are kept as the raw string the model sent;
the tool pipeline (agent/fleet/pipeline.py) parses and validates them.

Failures surface as one exception, `LLMError`, whose `kind` says what went wrong:

    timeout, connection, server, rate_limit     retryable: try again later
    empty                                        retryable: no choices came back
    context_length                               compact the context, then retry
    bad_request, auth, malformed                 not retryable as is

No message, repr or log line carries the API key.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from agent import logsetup
from agent.errors import FleetAgentError

if TYPE_CHECKING:  # the SDK (tens of MB) loads when an OpenAIChat is made, not with this module
    from collections.abc import Callable

    import openai

log = logsetup.get_logger(__name__)

LLM_ERROR_KINDS = frozenset(
    {
        "timeout",
        "connection",
        "server",
        "rate_limit",
        "context_length",
        "bad_request",
        "auth",
        "empty",
        "malformed",
    }
)
_RETRYABLE = frozenset({"timeout", "connection", "server", "rate_limit", "empty"})
_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "exceed_context_size",
    "exceeds the available context size",
    "maximum context length",
    "context length",
    "context window",
    "too many tokens",
    "prompt is too long",
)
_KEYLIKE = re.compile(r"\b(sk)-[A-Za-z0-9_\-*]{4,}")
_MAX_MESSAGE = 500


class LLMError(FleetAgentError):
    """A model call failed. `kind` is one of LLM_ERROR_KINDS; `retryable` says whether trying again may help."""

    def __init__(self, kind: str, message: str, *, status: int | None = None, retry_after: float | None = None,
                 window: int | None = None) -> None:
        if kind not in LLM_ERROR_KINDS:
            raise ValueError(f"unknown LLMError kind {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retryable = kind in _RETRYABLE
        self.retry_after = retry_after  # seconds the server asked us to wait, when it said
        self.window = window  # the context window the server reported in a context_length error, when it did

    def __repr__(self) -> str:
        return f"LLMError(kind={self.kind!r}, status={self.status!r}, message={str(self)!r})"


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text exactly as the model sent it; may be malformed

    def to_message(self) -> dict[str, Any]:
        """The OpenAI wire shape, for an assistant message's `tool_calls`."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the provider served from its prefix cache (0 when unreported)


@dataclass(frozen=True)
class ModelReply:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    latency_ms: float = 0.0
    model: str = ""

    def to_payload(self) -> dict[str, Any]:
        """A JSON-able dict for the event log; `from_payload` reverses it."""
        return {
            "text": self.text,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls],
            "usage": {
                "prompt_tokens": self.usage.prompt_tokens,
                "completion_tokens": self.usage.completion_tokens,
                "cached_tokens": self.usage.cached_tokens,
            },
            "finish_reason": self.finish_reason,
            "latency_ms": self.latency_ms,
            "model": self.model,
        }

    @classmethod
    def from_payload(cls, d: dict[str, Any]) -> ModelReply:
        usage = d.get("usage") or {}
        return cls(
            text=d.get("text") or "",
            tool_calls=tuple(
                ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"])
                for c in d.get("tool_calls") or ()
            ),
            usage=Usage(
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                cached_tokens=int(usage.get("cached_tokens") or 0),
            ),
            finish_reason=d.get("finish_reason"),
            latency_ms=float(d.get("latency_ms") or 0.0),
            model=d.get("model") or "",
        )


class ChatProvider(Protocol):
    name: str

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply: ...

    def list_models(self) -> list[str]: ...


def _raise_refused(e: BaseException) -> None:
    """The SDK wraps whatever its transport raised as a connection error: a write the daemon's fence refused
    (``LeaseBusy``) goes on as itself, so the daemon stops as one that lost the fleet, not as a model failure."""
    if isinstance(e.__cause__, FleetAgentError):
        raise e.__cause__


class OpenAIChat(ChatProvider):
    """A `ChatProvider` over the `openai` SDK, pointed at any OpenAI-compatible `base_url`."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None,
        timeout: float = 60.0,
        temperature: float = 0.2,
        max_tokens: int = 2048,
        max_retries: int = 1,
        retry_timeouts: bool = False,
        typed_lists: bool = False,
        hold: Callable[[Callable[[], Any]], Any] | None = None,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.name = f"openai:{model}"
        self.timeout = timeout
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_retries = max_retries  # fleet-agent's own retries (call_with_retries); the SDK never retries
        self.retry_timeouts = retry_timeouts
        # The SDK walks every message and tool schema against its TypedDicts before sending (~14 ms of CPU for
        # a 30k-token request; bench/sdk_cost.py). Both lists are already in wire shape, so they travel as
        # ``extra_body`` (sent as given, same bytes); True sends them through the typed parameters instead.
        self.typed_lists = typed_lists
        self._secret = api_key or ""
        import openai

        http: dict[str, Any] = {}
        if hold is not None:  # the daemon's: each write of a request to the socket is fenced (agent.httpfence)
            from agent.httpfence import fence_client

            http["http_client"] = fence_client(openai.DefaultHttpxClient(), hold)
        self._client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or "not-needed",
            timeout=timeout,
            max_retries=0,
            **http,
        )

    def __repr__(self) -> str:
        return f"OpenAIChat(base_url={self.base_url!r}, model={self.model!r}, api_key={'<set>' if self._secret else None})"

    def request_params(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The exact keyword arguments `complete` passes to `chat.completions.create`."""
        params: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if tools:
            # tool_choice without tools is rejected by OpenAI, so both go together.
            params["tools"] = tools
            params["tool_choice"] = "auto"
        return params

    def create_kwargs(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """What ``complete`` passes to ``chat.completions.create``: ``request_params``, with the messages and
        the tools moved to ``extra_body`` unless ``typed_lists``. Their keys stay where the typed parameters
        put them (an empty list there, replaced by the SDK's merge of ``extra_body``), so the request's bytes
        are the same either way."""
        params = self.request_params(messages, tools)
        if self.typed_lists:
            return params
        lists = {k: params[k] for k in ("messages", "tools") if k in params}
        return {**params, **{k: [] for k in lists}, "extra_body": lists}

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        import openai

        started = time.monotonic()
        try:
            try:
                response = self._client.chat.completions.create(**self.create_kwargs(messages, tools))
            except openai.OpenAIError as e:
                _raise_refused(e)
                raise self._map_error(e) from e
            latency_ms = round((time.monotonic() - started) * 1000, 1)
            reply = self._to_reply(response, latency_ms)
        except LLMError as err:
            log.warning(
                "llm.failed",
                model=self.model,
                kind=err.kind,
                status=err.status,
                latency_ms=round((time.monotonic() - started) * 1000, 1),
            )
            raise
        log.debug(
            "llm.replied",
            model=reply.model,
            latency_ms=latency_ms,
            tool_calls=len(reply.tool_calls),
            prompt_tokens=reply.usage.prompt_tokens,
            cached_tokens=reply.usage.cached_tokens,
            finish_reason=reply.finish_reason,
        )
        return reply

    def list_models(self) -> list[str]:
        import openai

        try:
            return [m.id for m in self._client.models.list()]
        except openai.OpenAIError as e:
            _raise_refused(e)
            raise self._map_error(e) from e

    # internals -----------------------------------------------------------------

    def _to_reply(self, response: Any, latency_ms: float) -> ModelReply:
        try:
            fields_set = getattr(response, "model_fields_set", None)
            if fields_set is not None and "choices" not in fields_set:
                raise AttributeError("choices")
            choices = response.choices
            if not choices:
                raise LLMError("empty", f"{self.base_url}: the model returned no choices; try again")
            choice = choices[0]
            message = choice.message
            calls = []
            for tc in message.tool_calls or ():
                if getattr(tc, "type", "function") == "custom":
                    calls.append(ToolCall(id=tc.id, name=tc.custom.name, arguments=tc.custom.input or ""))
                else:
                    calls.append(
                        ToolCall(id=tc.id, name=tc.function.name, arguments=tc.function.arguments or "")
                    )
            return ModelReply(
                text=message.content or "",
                tool_calls=tuple(calls),
                usage=_usage(getattr(response, "usage", None)),
                finish_reason=choice.finish_reason,
                latency_ms=latency_ms,
                model=getattr(response, "model", None) or self.model,
            )
        except (AttributeError, TypeError, KeyError, IndexError) as e:
            raise LLMError(
                "malformed", f"{self.base_url}: the response is not a chat completion ({type(e).__name__})"
            ) from e

    def _map_error(self, e: openai.OpenAIError) -> LLMError:
        import openai

        where = self.base_url
        if isinstance(e, openai.APITimeoutError):
            return LLMError("timeout", f"{where}: no reply within {self.timeout:g} s")
        if isinstance(e, openai.APIConnectionError):
            return LLMError("connection", f"{where}: cannot connect; check that the model server is running")
        if isinstance(e, openai.APIStatusError):
            status = e.status_code
            detail = self._scrub(_detail(e))
            if status in (401, 403):
                return LLMError(
                    "auth",
                    f"{where}: authentication refused ({status}); check the API key setting",
                    status=status,
                )
            if status == 429:
                return LLMError("rate_limit", f"{where}: rate limited (429): {detail}", status=status,
                                retry_after=_retry_after(e))
            if status >= 500:
                return LLMError("server", f"{where}: server error {status}: {detail}", status=status,
                                retry_after=_retry_after(e))
            if _is_context_length(e, detail):
                return LLMError(
                    "context_length",
                    f"{where}: the request exceeds the model's context length: {detail}; compact or lower the budget",
                    status=status,
                    window=reported_window(e.body, detail),
                )
            return LLMError("bad_request", f"{where}: request rejected ({status}): {detail}", status=status)
        if isinstance(e, openai.APIResponseValidationError):
            return LLMError("malformed", f"{where}: the response did not match the chat completion schema")
        if isinstance(e, openai.APIError):
            return LLMError("malformed", f"{where}: {self._scrub(e.message)}")
        return LLMError("malformed", f"{where}: {type(e).__name__}: {self._scrub(str(e))}")

    def _scrub(self, text: str) -> str:
        if self._secret:
            text = text.replace(self._secret, "<redacted>")
        text = _KEYLIKE.sub(r"\1-<redacted>", text)
        return text[:_MAX_MESSAGE]


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Usage(
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cached_tokens=int(cached or 0),
    )


def _detail(e: openai.APIStatusError) -> str:
    body = e.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
        if body.get("message"):
            return str(body["message"])
        if body.get("detail"):
            return str(body["detail"])
    if isinstance(body, str) and body:
        return body
    return e.message


def _is_context_length(e: openai.APIStatusError, detail: str) -> bool:
    if e.status_code not in (400, 413, 422):
        return False
    code = (e.code or "").lower()
    body = e.body if isinstance(e.body, dict) else {}
    err = body.get("error")
    inner: dict[str, Any] = err if isinstance(err, dict) else {}
    codes = {code, str(inner.get("code") or "").lower()}
    if "context_length_exceeded" in codes:
        return True
    text = f"{detail} {e.message}".lower()
    return any(marker in text for marker in _CONTEXT_MARKERS)


def _retry_after(e: openai.APIStatusError) -> float | None:
    """The wait the server asked for (``retry-after-ms`` or ``retry-after`` in seconds), if any."""
    headers = getattr(e.response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            continue
    return None


_WINDOW_RE = re.compile(r"maximum context length is (\d+)")


def reported_window(body: Any, detail: str) -> int | None:
    """The context window a server names in its context-length error: llama.cpp's ``n_ctx`` field, or
    vLLM's / OpenAI's "maximum context length is N tokens"."""
    inner = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(inner, dict) and isinstance(inner.get("n_ctx"), int) and inner["n_ctx"] > 0:
        return int(inner["n_ctx"])
    m = _WINDOW_RE.search(detail)
    return int(m.group(1)) if m else None


# ------------------------------------------------------------------ fleet-agent's own retries

RETRY_WAIT_S = 2.0  # the wait before a retry when the server names none; doubled each attempt, at most 30 s


def should_retry(err: LLMError, retry_timeouts: bool) -> bool:
    """Whether a failed request may be sent again. A timed-out request is not (the server may still be
    computing it, and a second copy only queues behind the first) unless the operator asked for it."""
    if err.kind == "timeout":
        return retry_timeouts
    return err.retryable


def call_with_retries(provider: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
                      on_retry: Any, wait: Any) -> ModelReply:
    """``provider.complete`` with up to ``provider.max_retries`` retries of failures that may pass.

    Before each retry ``on_retry(attempt, err, seconds)`` is told (it logs the retry) and
    ``wait(seconds)`` runs (it returns False to give up: the tick is stopping or out of time). The error
    finally raised says the attempts and the time they took ("no reply within 60 s, 2 attempts, 121 s")."""
    retries = max(0, int(getattr(provider, "max_retries", 0) or 0))
    retry_timeouts = bool(getattr(provider, "retry_timeouts", False))
    started = time.monotonic()
    attempt = 1
    while True:
        try:
            return cast(ModelReply, provider.complete(messages, tools))
        except LLMError as err:
            if attempt > retries or not should_retry(err, retry_timeouts):
                raise _with_attempts(err, attempt, time.monotonic() - started) from err
            seconds = err.retry_after if err.retry_after is not None else min(30.0, RETRY_WAIT_S * 2 ** (attempt - 1))
            on_retry(attempt, err, seconds)
            if not wait(seconds):
                raise _with_attempts(err, attempt, time.monotonic() - started) from err
            attempt += 1


def _with_attempts(err: LLMError, attempts: int, elapsed: float) -> LLMError:
    """``err`` with the attempts made and the time they took in its message (timeouts say it first)."""
    text = str(err)
    n = f"{attempts} attempt{'s' if attempts != 1 else ''}, {elapsed:.0f} s"
    text = text + f", {n}" if err.kind == "timeout" else text + f" ({n})"
    return LLMError(err.kind, text, status=err.status, retry_after=err.retry_after, window=err.window)


# ------------------------------------------------------------------ tool calls written as text


@dataclass(frozen=True)
class TextCall:
    """A tool call a model wrote in its reply's text instead of ``tool_calls``."""

    name: str
    arguments: str  # JSON text of the arguments as written ("" when none could be read)
    shape: str      # tagged | fenced | prefixed | json


_TAGGED = re.compile(r"<tool_call>\s*")
# A fence's opening; the JSON after it is read by the decoder, not up to the next ``` (the arguments of a
# call written in a fence often quote a fenced text themselves).
_FENCE_OPEN = re.compile(r"```[A-Za-z]*[ \t]*")
_PREFIXED = re.compile(r"\bfunctions\.([A-Za-z_][\w\-]*)\s*[:(]?\s*")
_DECODER = json.JSONDecoder()


def _json_span(text: str, pos: int) -> tuple[Any, int]:
    """The JSON value starting at ``pos`` (after blanks) and where it ends, or (None, pos)."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    try:
        return _DECODER.raw_decode(text, pos)
    except ValueError:
        return None, pos


def _json_at(text: str, pos: int) -> Any:
    """The JSON value starting at ``pos`` (after blanks), or None."""
    return _json_span(text, pos)[0]


def _fenced_calls(text: str) -> list[TextCall]:
    calls: list[TextCall] = []
    done = 0
    for m in _FENCE_OPEN.finditer(text):
        if m.start() < done:
            continue  # inside a call already read
        value, end = _json_span(text, m.end())
        call = _as_text_call(value, "fenced")
        if call is not None:
            calls.append(call)
            done = end
    return calls


def _as_text_call(obj: Any, shape: str) -> TextCall | None:
    """``{"name": ..., "arguments"|"parameters": ...}`` as a call, else None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    if "arguments" not in obj and "parameters" not in obj:
        return None
    args = obj.get("arguments", obj.get("parameters"))
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return TextCall(obj["name"], text, shape)


def find_text_calls(text: str) -> list[TextCall]:
    """Tool calls written in ``text`` in the shapes small models use: ``<tool_call>{...}</tool_call>``
    (tagged), a fenced ``{"name": ..., "arguments": ...}`` (fenced), ``functions.NAME:{...}`` (prefixed),
    or the whole reply being such an object (json). Prose that merely names a tool is not a call."""
    if not text:
        return []
    calls: list[TextCall] = []
    for m in _TAGGED.finditer(text):
        call = _as_text_call(_json_at(text, m.end()), "tagged")
        if call is not None:
            calls.append(call)
    calls += _fenced_calls(text)
    for m in _PREFIXED.finditer(text):
        args = _json_at(text, m.end())
        calls.append(TextCall(m.group(1), json.dumps(args, ensure_ascii=False) if isinstance(args, dict) else "",
                              "prefixed"))
    if not calls:
        call = _as_text_call(_json_at(text.strip(), 0), "json")
        if call is not None:
            calls.append(call)
    return calls
