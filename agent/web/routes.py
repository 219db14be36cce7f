"""The HTTP routes: /metrics, /healthz, and the console's pages (server-rendered, Jinja autoescape on).

Every response carries a strict Content-Security-Policy: scripts and styles only from /static (htmx,
vendored), no inline script, no inline style, no framing. Text from the model, vast.ai, tools and files
reaches the page only through Jinja's autoescape (no ``|safe`` on it).
"""

from __future__ import annotations

import collections
import ipaddress
import math
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import jinja2
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from agent.errors import FleetAgentError, UsageError
from agent.feedback import SEVERITIES
from agent.times import parse_operator_time, utc_ts
from agent.web.auth import COOKIE
from agent.web.console import ALERT_STATUSES, Console, NotFound

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
MAX_FORM_BYTES = 64 * 1024
# Wrong login tokens tolerated per client address, and from everyone together, per window.
LOGIN_FAILURES_PER_CLIENT = 5
LOGIN_FAILURES_OVERALL = 50
LOGIN_WINDOW_S = 60.0


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(loader=jinja2.PackageLoader("agent.web", "templates"), autoescape=True)
    env.filters["t"] = lambda ts: f"{ts[:10]} {ts[11:19]}Z" if ts else "?"
    env.filters["money"] = lambda x: f"${x:,.2f}" if isinstance(x, int | float) else "?"
    return Jinja2Templates(env=env)


def host_allowed(host_header: str | None, allowed: list[str]) -> bool:
    """Whether a request's ``Host`` may reach the console. An IP address or localhost always may: DNS
    rebinding needs a name the attacker controls, so only names are checked, against ``http.allowed_hosts``
    (``fleet.example.com`` exactly, ``.example.com`` for every name under it). No Host header (HTTP/1.0, not
    a browser) passes."""
    if not host_header:
        return True
    host = host_header.strip().lower()
    if host.startswith("["):  # [::1]:9464
        return "]" in host
    host = host.rpartition(":")[0] if host.count(":") == 1 else host
    host = host.rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    for name in allowed:
        name = name.lower().rstrip(".")
        if host == name or (name.startswith(".") and (host.endswith(name) or host == name[1:])):
            return True
    return False


class LoginLimiter:
    """Wrong console tokens allowed per client address (and in all) within a sliding window; then 429
    until the oldest failure leaves the window. Right tokens never count."""

    def __init__(self, per_client: int = LOGIN_FAILURES_PER_CLIENT, overall: int = LOGIN_FAILURES_OVERALL,
                 window_s: float = LOGIN_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_client, self.overall, self.window_s, self.clock = per_client, overall, window_s, clock
        self._failures: dict[str, collections.deque[float]] = {}
        self._all: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()

    def _trim(self, q: collections.deque[float], now: float) -> None:
        while q and q[0] <= now - self.window_s:
            q.popleft()

    def wait_s(self, client: str) -> float:
        """Seconds this client must wait before another try (0: it may try now)."""
        now = self.clock()
        with self._lock:
            mine = self._failures.get(client, collections.deque())
            self._trim(mine, now)
            self._trim(self._all, now)
            waits = [q[0] + self.window_s - now for q, cap in ((mine, self.per_client), (self._all, self.overall))
                     if len(q) >= cap]
            return max(waits, default=0.0)

    def failed(self, client: str) -> None:
        now = self.clock()
        with self._lock:
            self._failures.setdefault(client, collections.deque()).append(now)
            self._all.append(now)
            if len(self._failures) > 10_000:  # a flood of addresses: forget the quiet ones
                for k in [k for k, q in self._failures.items() if not q or q[-1] <= now - self.window_s]:
                    del self._failures[k]


class _Security(BaseHTTPMiddleware):
    def __init__(self, app: Any, console: Console) -> None:
        super().__init__(app)
        self.console = console  # its http settings change on a reload (Console.apply_http)

    async def dispatch(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if not host_allowed(request.headers.get("host"), self.console.allowed_hosts):
            response: Response = PlainTextResponse(
                "this console does not answer to that host name; add it to http.allowed_hosts if it is yours\n",
                400)
        else:
            response = await call_next(request)
        for k, v in SECURITY_HEADERS.items():
            response.headers.setdefault(k, v)
        return response


class _Site:
    """The pages and endpoints of one console (each route a method)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.templates = _templates()
        self.logins = LoginLimiter()

    def page(self, request: Request, name: str, ctx: dict[str, Any], status: int = 200) -> Response:
        nonce = self.console.auth.session_nonce(request.cookies.get(COOKIE))
        base = {"request": request, "logged_in": nonce is not None or False,
                "csrf": self.console.auth.csrf_for(nonce) if nonce else "", "writable": self.console.auth.enabled,
                "operator": self.console.auth.name, "agent_id": self.console.settings.agent_id}
        return self.templates.TemplateResponse(request, name, {**base, **ctx}, status_code=status)

    def guarded(self, fn: Callable[[Request], Response]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await run_in_threadpool(fn, request)
            except NotFound as e:
                return self.page(request, "error.html", {"message": str(e)}, 404)
            except FleetAgentError as e:
                return self.page(request, "error.html", {"message": str(e)}, 400)
        return endpoint

    async def writing(self, request: Request) -> tuple[FormData | None, Response | None]:
        """The form, or the refusal: the write check runs before anything is appended."""
        if int(request.headers.get("content-length") or 0) > MAX_FORM_BYTES:
            return None, PlainTextResponse("the form is too large", 413)
        form = await request.form()
        csrf = form.get("csrf")
        d = self.console.auth.check_write(authorization=request.headers.get("authorization"),
                                     cookie=request.cookies.get(COOKIE), csrf=csrf if isinstance(csrf, str) else None)
        if not d.ok:
            return None, PlainTextResponse(d.why + "\n", d.status)
        return form, None

    def metrics(self, _request: Request) -> Response:
        return Response(generate_latest(self.console.registry), media_type=CONTENT_TYPE_LATEST)

    def healthz(self, _request: Request) -> Response:
        ok, why = self.console.health()
        return PlainTextResponse(why + "\n", 200 if ok else 503)

    def overview(self, request: Request) -> Response:
        return self.page(request, "overview.html", self.console.overview())

    def alerts(self, request: Request) -> Response:
        st, sev = request.query_params.get("status") or None, request.query_params.get("severity") or None
        return self.page(request, "alerts.html", {"alerts": self.console.alerts(st, sev), "status": st, "severity": sev,
                                             "statuses": ALERT_STATUSES, "severities": SEVERITIES,
                                             "silences": self.console.silences()})

    def alert(self, request: Request) -> Response:
        a, history = self.console.alert(_int(request.path_params["id"], "alert id"))
        return self.page(request, "alert.html", {"alert": a, "history": history})

    async def ack(self, request: Request) -> Response:
        form, refused = await self.writing(request)
        if refused is not None:
            return refused
        assert form is not None
        note = form.get("note")
        try:
            alert_id = _int(request.path_params["id"], "alert id")
            await run_in_threadpool(self.console.ack, alert_id, note if isinstance(note, str) else None)
        except FleetAgentError as e:
            return self.page(request, "error.html", {"message": str(e)}, 400)
        return RedirectResponse(f"/alerts/{alert_id}", 303)

    async def note(self, request: Request) -> Response:
        form, refused = await self.writing(request)
        if refused is not None:
            return refused
        assert form is not None
        text = form.get("text")
        try:
            await run_in_threadpool(self.console.note, text if isinstance(text, str) else "", form.get("pin") == "on")
        except FleetAgentError as e:
            return self.page(request, "error.html", {"message": str(e)}, 400)
        return RedirectResponse("/thread", 303)

    def thread(self, request: Request) -> Response:
        q = request.query_params
        kinds = [k for k in q.getlist("kind") if k]
        before = _opt_int(q.get("before"), "before")
        rows = self.console.thread(kinds=kinds, query=q.get("q") or None, before=before)
        return self.page(request, "thread.html", {"rows": rows, "kinds": kinds, "q": q.get("q") or "",
                                             "all_kinds": self.console.kinds(), "before": before,
                                             "newest": rows[0]["seq"] if rows else 0,
                                             "oldest": rows[-1]["seq"] if rows else 0})

    def thread_new(self, request: Request) -> Response:
        q = request.query_params
        after = _opt_int(q.get("after"), "after") or 0
        kinds = [k for k in q.getlist("kind") if k]
        rows = self.console.thread(kinds=kinds, query=None, before=None, after=after)
        newest = rows[0]["seq"] if rows else after
        return self.page(request, "thread_new.html", {"rows": rows, "kinds": kinds, "newest": newest})

    def travel(self, request: Request) -> Response:
        q = request.query_params
        m = self.console.moment(tick=_opt_int(q.get("tick"), "tick"), seq=_opt_int(q.get("seq"), "seq"),
                           at=_at(q.get("at"), self.console.clock()))
        return self.page(request, "travel.html", m)

    def travel_diff(self, request: Request) -> Response:
        q = request.query_params
        a, b = _int(q.get("a") or "", "a"), _int(q.get("b") or "", "b")
        ha, hb, lines = self.console.diff(a, b)
        return self.page(request, "diff.html", {"a": a, "b": b, "hash_a": ha, "hash_b": hb, "lines": lines})

    def knowledge(self, request: Request) -> Response:
        return self.page(request, "knowledge.html", {"files": self.console.knowledge()})

    def knowledge_file(self, request: Request) -> Response:
        v = _opt_int(request.query_params.get("v"), "v")
        return self.page(request, "knowledge_file.html", self.console.knowledge_file(request.path_params["name"], v))

    def login_form(self, request: Request) -> Response:
        return self.page(request, "login.html", {"error": None})

    async def login(self, request: Request) -> Response:
        client = request.client.host if request.client else "?"
        wait = self.logins.wait_s(client)
        if wait > 0:
            r = self.page(request, "login.html", {"error": f"too many wrong tokens; try again in {math.ceil(wait)} s"},
                          429)
            r.headers["Retry-After"] = str(math.ceil(wait))
            return r
        form = await request.form()
        token = form.get("token")
        if not self.console.auth.enabled or not isinstance(token, str) or not self.console.auth.token_ok(token.strip()):
            why = "this console is read-only (no token configured)" if not self.console.auth.enabled else "wrong token"
            if self.console.auth.enabled:
                self.logins.failed(client)
            return self.page(request, "login.html", {"error": why}, 401)
        r = RedirectResponse("/", 303)
        r.set_cookie(COOKIE, self.console.auth.new_session(), httponly=True, samesite="strict",
                     secure=request.url.scheme == "https", path="/")
        return r

    async def logout(self, _request: Request) -> Response:
        r = RedirectResponse("/", 303)
        r.delete_cookie(COOKIE, path="/")
        return r



def create_app(console: Console) -> Starlette:
    """The ASGI application serving ``console``."""
    site = _Site(console)
    static = StaticFiles(directory=str(resources.files("agent.web").joinpath("static")))
    routes = [
        Route("/metrics", site.guarded(site.metrics)), Route("/healthz", site.guarded(site.healthz)),
        Route("/", site.guarded(site.overview)), Route("/alerts", site.guarded(site.alerts)),
        Route("/alerts/{id}", site.guarded(site.alert)), Route("/alerts/{id}/ack", site.ack, methods=["POST"]),
        Route("/notes", site.note, methods=["POST"]),
        Route("/thread", site.guarded(site.thread)), Route("/thread/new", site.guarded(site.thread_new)),
        Route("/travel", site.guarded(site.travel)), Route("/travel/diff", site.guarded(site.travel_diff)),
        Route("/knowledge", site.guarded(site.knowledge)),
        Route("/knowledge/{name}", site.guarded(site.knowledge_file)),
        Route("/login", site.guarded(site.login_form)), Route("/login", site.login, methods=["POST"]),
        Route("/logout", site.logout, methods=["POST"]),
        Mount("/static", static, name="static"),
    ]
    return Starlette(routes=routes, middleware=[Middleware(_Security, console=console)])


# Every route that changes something: the security tests walk this list.
WRITE_ROUTES = ("/alerts/{id}/ack", "/notes")


def _int(v: str, what: str) -> int:
    v = v.strip()
    if not v.isascii() or not v.isdigit() or len(v) > 18:
        raise UsageError(f"{what} must be a whole number below 10^18, got {v[:40]!r}")
    return int(v)


def _opt_int(v: str | None, what: str) -> int | None:
    return None if v is None or v == "" else _int(v, what)


def _at(v: str | None, now: float) -> str | None:
    """The time-travel page's ``at``: any time an operator writes (``agent.times.parse_operator_time``)."""
    if not v:
        return None
    return utc_ts(parse_operator_time(v, datetime.fromtimestamp(now, UTC)))


__all__ = ["WRITE_ROUTES", "HTMLResponse", "create_app"]
