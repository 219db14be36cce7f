"""A scripted OpenAI-compatible HTTP server on 127.0.0.1, for tests and demos.

It speaks `POST /v1/chat/completions` and `GET /v1/models`, so the real `openai`
SDK runs end to end against it. Replies come from a script::

    with FakeOpenAI() as fake:
        fake.enqueue(
            reply(tool_calls=[("search_offers", {"gpu": "RTX_4090"})]),
            error(500),
            reply("done"),
            lambda request: reply(f"saw {len(request['messages'])} messages"),
        )
        ...  # point OpenAIChat at fake.base_url
        fake.requests[0].json["messages"]

Each chat request consumes one step; when the script runs dry the server answers
with `.default` (a plain "nothing to do" reply). Every request is recorded with its
raw bytes. Usage figures are deterministic: `prompt_tokens` is the raw body length
// 4 and `cached_tokens` is the common byte prefix of this request's `messages`
serialisation with the previous chat request's, // 4, so callers can observe
whether their requests extend each other byte for byte.

Modes that real servers have, each off by default:

- ``strict_history=True``: a request whose history holds an assistant tool call with
  arguments that are not a JSON object is refused with HTTP 400, as vLLM and
  llama.cpp's llama-server do (they parse the arguments to render the chat template).
- ``context_window=N``: the server's window; a request whose prompt tokens plus
  ``max_tokens`` pass it gets vLLM's 400 ("This model's maximum context length is N
  tokens. However, you requested ..."); ``window_style="llama.cpp"`` answers as
  llama-server does instead, and ``"ollama"`` refuses nothing (Ollama's OpenAI endpoint cuts
  the prompt silently). The window is reported where each server reports it:
  ``max_model_len`` in ``/v1/models`` (vLLM), ``n_ctx`` in ``/props`` (llama.cpp),
  ``num_ctx`` from ``POST /api/show`` (Ollama).
- ``report_usage=False``: completions carry no ``usage`` (some servers omit it).

Scripted steps cover the rest: ``text_tool_call`` (a call written as text in one of the
three shapes small models use), ``fenced_calls`` (several calls in ```json fences, as Qwen writes them), ``reply("")`` (an empty reply), ``error(500)`` then a
reply, ``hang(30)`` (a stall longer than the client waits).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "FakeOpenAI",
    "RecordedRequest",
    "Step",
    "context_length_error",
    "echo_prompt",
    "empty_choices",
    "error",
    "fenced_calls",
    "hang",
    "is_summary_request",
    "nothing_to_do",
    "raw",
    "reply",
    "summary_reply",
    "text_tool_call",
]

ToolCallSpec = tuple[str, dict[str, Any] | str]


@dataclass(frozen=True)
class Step:
    """One scripted answer. Build it with the module-level constructors."""

    kind: str  # reply | error | hang | raw
    text: str = ""
    tool_calls: tuple[ToolCallSpec, ...] = ()
    finish_reason: str | None = None
    status: int = 200
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()
    seconds: float = 0.0
    then: Step | None = None


StepLike = Step | Callable[[dict[str, Any]], Step]


def reply(
    text: str = "",
    tool_calls: list[ToolCallSpec] | tuple[ToolCallSpec, ...] = (),
    finish_reason: str | None = None,
) -> Step:
    """A normal completion: text and/or tool calls (arguments as a dict, or a raw string sent verbatim)."""
    return Step(kind="reply", text=text, tool_calls=tuple(tool_calls), finish_reason=finish_reason)


def error(
    status: int = 500, body: dict[str, Any] | str | None = None, headers: dict[str, str] | None = None
) -> Step:
    """An HTTP error with an OpenAI-shaped body by default (or the given dict / text)."""
    if body is None:
        body = {"error": {"message": f"fake server error {status}", "type": "server_error", "code": None}}
    return Step(kind="error", status=status, body=body, headers=tuple((headers or {}).items()))


def context_length_error() -> Step:
    """A 400 shaped like OpenAI's `context_length_exceeded`."""
    return error(
        400,
        {
            "error": {
                "message": "This model's maximum context length is 8192 tokens. However, your messages "
                "resulted in 9001 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
    )


TEXT_CALL_SHAPES = ("tagged", "fenced", "prefixed")


def text_tool_call(name: str, arguments: dict[str, Any], shape: str = "tagged", prose: str = "") -> Step:
    """A reply whose tool call is written in the content instead of ``tool_calls``, as small models do:
    ``tagged`` (``<tool_call>{...}</tool_call>``, Qwen's hermes format), ``fenced`` (a ```json block
    holding ``{"name": ..., "arguments": ...}``) or ``prefixed`` (``functions.NAME:{...}``)."""
    args = json.dumps(arguments)
    if shape == "tagged":
        body = f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'
    elif shape == "fenced":
        body = f'```json\n{{"name": "{name}", "arguments": {args}}}\n```'
    elif shape == "prefixed":
        body = f"functions.{name}:{args}"
    else:
        raise ValueError(f"shape must be one of {TEXT_CALL_SHAPES}")
    return reply(f"{prose}\n{body}" if prose else body)


def fenced_calls(calls: list[tuple[str, dict[str, Any]]], prose: str = "") -> Step:
    """A reply that writes its tool calls the way Qwen2.5-Coder-1.5B does under a server that parses only
    ``<tool_call>`` tags (vLLM's hermes parser, llama-server): each call a pretty-printed
    ``{"name": ..., "arguments": {...}}`` in its own ```json fence, several in one message when it means
    several calls, after a line of prose when ``prose`` is given."""
    fences = "\n\n".join("```json\n" + json.dumps({"name": n, "arguments": a}, indent=2) + "\n```" for n, a in calls)
    return reply(f"{prose}\n\n{fences}" if prose else fences)


def hang(seconds: float, then: Step | None = None) -> Step:
    """Sleep `seconds` (longer than the client's timeout), then answer with `then` (a plain reply by default)."""
    return Step(kind="hang", seconds=seconds, then=then)


def empty_choices() -> Step:
    """A 200 completion whose `choices` list is empty."""
    return Step(kind="reply", body="empty_choices")


def raw(body: dict[str, Any] | bytes, status: int = 200) -> Step:
    """Send exactly this body (a dict is JSON-encoded) with this status."""
    return Step(kind="raw", status=status, body=body)


def is_summary_request(body: dict[str, Any]) -> bool:
    """Whether a chat request asks for fleet-agent's rolling summary: the agent's own request continued by
    the compaction instruction (or by the request to write a rejected summary again), or the summariser's
    request of its own (its system prompt)."""
    msgs = body.get("messages") or []
    if not msgs:
        return False
    last, first = str(msgs[-1].get("content") or ""), str(msgs[0].get("content") or "")
    return (msgs[-1].get("role") == "user" and last.startswith(("[compaction]", "That summary was rejected"))) or (
        msgs[0].get("role") == "system" and first.startswith("You maintain the rolling summary"))


def _instruction(body: dict[str, Any]) -> str:
    for m in reversed(body.get("messages") or []):
        c = str(m.get("content") or "")
        if m.get("role") == "user" and ("Open alerts to mention:" in c):
            return c
    return ""


def summary_reply(body: dict[str, Any]) -> Step:
    """A summariser that does its job: every required section, and every alert, instance, directive and
    operator input the request asks it to mention (read from the request's instruction lines)."""
    import re

    want = {}
    for line in _instruction(body).splitlines():
        for key in ("Open alerts", "Instances the agent owns", "Pinned operator directives",
                    "Operator inputs the summary cites", "Operator inputs", "Overrides and pause", "Excluded hosts"):
            if line.startswith(key):
                want[key] = line.split(":", 1)[1].strip()
                break
    inst = ", ".join(re.findall(r"\d+", want.get("Instances the agent owns", ""))) or "none"
    alerts = ", ".join(f"alert #{a}" for a in re.findall(r"#(\d+)", want.get("Open alerts", ""))) or "none"
    directives = ", ".join(f"#{d}" for d in re.findall(r"#(\d+)", want.get("Pinned operator directives", "")))
    inputs = ", ".join(f"#{d}" for d in re.findall(r"#(\d+)", want.get("Operator inputs", "") + " "
                                                   + want.get("Operator inputs the summary cites", "")))
    steering = ", ".join(f"#{d}" for d in re.findall(r"#(\d+)", want.get("Overrides and pause", "")))
    excluded = want.get("Excluded hosts", "none")
    extra = f"\n- in force: {steering}; excluded: {excluded}" if steering or excluded not in ("", "none") else ""
    return reply(f"## Fleet state and commitments\n- instances: {inst}\n## Decisions and why\n- kept the fleet\n"
                 f"## Open problems\n- {alerts}\n## Operator directives\n- standing: {directives or 'none'}; "
                 f"inputs: {inputs or 'none'}{extra}\n## Completed actions\n- searched offers")


def nothing_to_do() -> Step:
    """What small models answer when asked to summarise and they do not: one idle sentence."""
    return reply("Nothing to do this tick.")


def echo_prompt(which: str = "last") -> Callable[[dict[str, Any]], Step]:
    """A reply that repeats the instructions it was given, as small models do: the last message's text
    (``which="last"``) or the system message's (``"system"``)."""
    def step(body: dict[str, Any]) -> Step:
        msgs = body.get("messages") or []
        pick = msgs[-1:] if which == "last" else [m for m in msgs if m.get("role") == "system"][:1]
        return reply(str(pick[0].get("content") or "") if pick else "")
    return step


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it.

    Header names are lower-cased; Authorization is redacted to "Bearer <redacted>" and
    `auth_ok` says whether it matched the server's api_key.
    """

    method: str
    path: str
    raw: bytes
    json: Any
    headers: dict[str, str]
    auth_ok: bool


@dataclass
class _Counters:
    completions: int = 0
    previous_messages: bytes = b""
    ids: int = 0


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _bad_history_arguments(body: Any) -> str | None:
    """What a strict server says about the first history tool call whose arguments are not a JSON object."""
    for m in body.get("messages") or [] if isinstance(body, dict) else []:
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        for c in m.get("tool_calls") or []:
            args = (c.get("function") or {}).get("arguments")
            if not isinstance(args, str) or not args.strip():
                continue
            try:
                parsed = json.loads(args)
            except ValueError as e:
                return f"Failed to parse tool call arguments as JSON: {e}"
            if not isinstance(parsed, dict):
                return "tool call arguments must be a JSON object"
    return None


def _messages_bytes(body: Any) -> bytes:
    messages = body.get("messages", []) if isinstance(body, dict) else []
    return json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass
class FakeOpenAI:
    """The scripted server. Thread-safe; `start()`/`stop()` or use it as a context manager.

    `retry_after_ms` is sent as a `retry-after-ms` header on every error response so the
    SDK's retries do not wait its default half second; set it to None to omit the header.
    """

    model: str = "fake-model"
    api_key: str | None = None
    models: tuple[str, ...] = ()
    retry_after_ms: int | None = 5
    strict_history: bool = False
    context_window: int | None = None
    window_style: str = "vllm"  # or "llama.cpp" / "ollama": how the window is reported and enforced
    report_usage: bool = True
    default: StepLike = field(default_factory=lambda: reply("nothing to do"))
    requests: list[RecordedRequest] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._script: deque[StepLike] = deque()
        self._counters = _Counters()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle ---------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not started")
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # script ------------------------------------------------------------------

    def enqueue(self, *steps: StepLike) -> None:
        with self._lock:
            self._script.extend(steps)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._script)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def _next_step(self, body: Any) -> Step:
        with self._lock:
            step = self._script.popleft() if self._script else self.default
        while callable(step) and not isinstance(step, Step):
            step = step(body)
        return step

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _usage_for(self, raw_body: bytes, body: Any) -> dict[str, Any]:
        current = _messages_bytes(body)
        with self._lock:
            cached = _common_prefix(current, self._counters.previous_messages) // 4
            self._counters.previous_messages = current
        return {
            "prompt_tokens": len(raw_body) // 4,
            "completion_tokens": 7,
            "total_tokens": len(raw_body) // 4 + 7,
            "prompt_tokens_details": {"cached_tokens": cached},
        }

    def prompt_tokens(self, raw_body: bytes) -> int:
        """The fake's token count of a request: its raw body length // 4."""
        return len(raw_body) // 4

    def refusal(self, raw_body: bytes, body: Any) -> dict[str, Any] | None:
        """The 400 body a real server sends for this request in the enabled modes, else None."""
        if self.strict_history:
            bad = _bad_history_arguments(body)
            if bad is not None:
                return {"error": {"message": bad, "type": "BadRequestError", "param": None, "code": 400}}
        if self.context_window and self.window_style != "ollama":  # Ollama cuts the prompt silently instead
            prompt = self.prompt_tokens(raw_body)
            completion = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
            if prompt + completion > self.context_window:
                return self._window_error(prompt, completion)
        return None

    def _window_error(self, prompt: int, completion: int) -> dict[str, Any]:
        n = self.context_window
        if self.window_style == "llama.cpp":
            return {"error": {"code": 400, "message": "the request exceeds the available context size, try "
                              "increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": prompt,
                              "n_ctx": n}}
        return {"error": {"message": f"This model's maximum context length is {n} tokens. However, you "
                          f"requested {prompt + completion} tokens ({prompt} in the messages, {completion} in the "
                          "completion). Please reduce the length of the messages or completion.",
                          "type": "BadRequestError", "param": None, "code": 400}}

    def _new_id(self) -> int:
        with self._lock:
            self._counters.ids += 1
            return self._counters.ids

    def completion_body(self, step: Step, usage: dict[str, Any]) -> dict[str, Any]:
        n = self._new_id()
        body: dict[str, Any] = {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
        }
        if self.report_usage:
            body["usage"] = usage
        if step.body == "empty_choices":
            body["choices"] = []
            return body
        tool_calls = []
        for i, (name, arguments) in enumerate(step.tool_calls):
            args = arguments if isinstance(arguments, str) else json.dumps(arguments)
            tool_calls.append(
                {"id": f"call_{n}_{i}", "type": "function", "function": {"name": name, "arguments": args}}
            )
        message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
        if tool_calls:
            message["tool_calls"] = tool_calls
        finish = step.finish_reason or ("tool_calls" if tool_calls else "stop")
        body["choices"] = [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}]
        return body


class _Handler(BaseHTTPRequestHandler):
    """One fake server's request handler; ``fake`` is set on the subclass ``_make_handler`` makes."""

    fake: FakeOpenAI
    protocol_version = "HTTP/1.1"
    wbufsize = -1  # headers and body leave in one write: no Nagle / delayed-ACK stalls
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    # plumbing ------------------------------------------------------------

    def _read(self) -> tuple[bytes, Any, bool]:
        length = int(self.headers.get("Content-Length") or 0)
        raw_body = self.rfile.read(length) if length else b""
        try:
            parsed = json.loads(raw_body) if raw_body else None
        except ValueError:
            parsed = None
        auth = self.headers.get("Authorization")
        auth_ok = self.fake.api_key is None or auth == f"Bearer {self.fake.api_key}"
        headers = {k.lower(): v for k, v in self.headers.items()}
        if "authorization" in headers:
            headers["authorization"] = "Bearer <redacted>"
        self.fake._record(
            RecordedRequest(
                method=self.command,
                path=self.path,
                raw=raw_body,
                json=parsed,
                headers=headers,
                auth_ok=auth_ok,
            )
        )
        return raw_body, parsed, auth_ok

    def _send(self, status: int, body: Any, headers: tuple[tuple[str, str], ...] = ()) -> None:
        if isinstance(body, bytes):
            data, ctype = body, "application/octet-stream"
        elif isinstance(body, str):
            data, ctype = body.encode(), "text/plain; charset=utf-8"
        else:
            data, ctype = json.dumps(body).encode(), "application/json"
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            if status >= 400 and self.fake.retry_after_ms is not None:
                self.send_header("retry-after-ms", str(self.fake.retry_after_ms))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (a timeout test); nothing left to tell it.
            self.close_connection = True

    def _unauthorized(self) -> None:
        self._send(
            401,
            {
                "error": {
                    "message": "Incorrect API key provided.",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
        )

    # routes ----------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        _, _, auth_ok = self._read()
        if not auth_ok:
            self._unauthorized()
            return
        if self.path.rstrip("/").endswith("/models"):
            ids = self.fake.models or (self.fake.model,)
            data: list[dict[str, Any]] = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"}
                                          for m in ids]
            if self.fake.context_window and self.fake.window_style == "vllm":
                for d in data:
                    d["max_model_len"] = self.fake.context_window
            self._send(200, {"object": "list", "data": data})
            return
        if self.path.rstrip("/") == "/props" and self.fake.window_style == "llama.cpp":
            self._send(200, {"default_generation_settings": {"n_ctx": self.fake.context_window or 4096},
                             "total_slots": 1, "chat_template": "..."})
            return
        self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        if self.path.rstrip("/") == "/api/show" and self.fake.window_style == "ollama":
            self._ollama_show()
            return
        raw_body, body, auth_ok = self._read()
        if not auth_ok:
            self._unauthorized()
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        if body is None:
            self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
            return
        refusal = self.fake.refusal(raw_body, body)
        if refusal is not None:
            self._send(400, refusal)
            return
        usage = self.fake._usage_for(raw_body, body)
        step = self.fake._next_step(body)
        self._answer(step, usage)

    def _ollama_show(self) -> None:
        """Ollama's ``POST /api/show``: the model's parameters, ``num_ctx`` among them."""
        _, body, _ = self._read()
        window = self.fake.context_window or 2048
        self._send(200, {"parameters": f"num_ctx {window}\nstop \"<|im_end|>\"",
                         "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768},
                         "details": {"family": "qwen2"}, "model": (body or {}).get("model")})

    def _answer(self, step: Step, usage: dict[str, Any]) -> None:
        if step.kind == "hang":
            self.fake._stopping.wait(step.seconds)
            self._answer(step.then or reply("late reply"), usage)
        elif step.kind == "error":
            self._send(step.status, step.body, step.headers)
        elif step.kind == "raw":
            self._send(step.status, step.body)
        else:
            self._send(200, self.fake.completion_body(step, usage))


def _make_handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    return type("Handler", (_Handler,), {"fake": fake})


def iter_tool_names(request: RecordedRequest) -> Iterator[str]:
    """The tool names offered in a recorded chat request (empty when none were sent)."""
    body = request.json if isinstance(request.json, dict) else {}
    for tool in body.get("tools") or []:
        yield tool.get("function", {}).get("name", "")
