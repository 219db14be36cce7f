"""An httpx client for the vast.ai REST API, speaking as the official `vastai` CLI does.

    VastClient      list/get instances, search offers, rent, destroy, start/stop/label/reboot,
                    logs, current user; reads get bounded, jittered retries on 429/502/503/504
                    and transport errors; a call that changes the fleet is sent once, and again
                    only when the connection was refused before anything was sent (or, for all
                    but a rent, when a 429 refused it)

vast.ai limits each endpoint per key as a minimum interval between requests and sends no
Retry-After. The client paces itself: two requests to one endpoint (method and path, ids
counted as one) start at least ``min_interval`` seconds apart, whatever thread sends them. A
429 is backed off for seconds (1 s, growing x1.5, jittered), never past ``deadline`` (the
tick's end): a wait that would pass it is not taken and the call fails instead.
    Instance, Offer, User, RentOutcome   typed, frozen results
    VastError       the one exception; its text never carries the API key

Requests mirror the CLI's (see VAST_API.md): Bearer auth, JSON bodies, query values
JSON-encoded then quote_plus'd, `/api/v0` in front of paths without a version.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote_plus

from agent import logsetup
from agent.errors import FleetAgentError

if TYPE_CHECKING:  # httpx loads with the client: the records below (Instance, Offer) are read without it
    import httpx

log = logsetup.get_logger(__name__)

RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
MAX_RETRY_AFTER_S = 60.0
FIRST_BACKOFF_S = 0.15
FIRST_429_BACKOFF_S = 1.0   # vast.ai's limits are intervals of about a second: wait seconds, not 0.15 s
BACKOFF_FACTOR = 1.5
DEFAULT_MIN_INTERVAL_S = 0.6  # vast.ai's 429s say "threshold=2.0 (requests/s)"; a margin over 0.5 s
LOG_POLLS = 30                # as the official client polls a log upload: 30 times, 0.3 s apart
LOG_POLL_INTERVAL_S = 0.3
_ID_SEGMENT = re.compile(r"/\d+(?=/|$)")
PAGE_LIMIT = 25
MAX_PAGES = 400  # 10,000 instances: a guard against a server that never stops paging
DEFAULT_FILTERS: dict[str, dict[str, bool]] = {
    "verified": {"eq": True},
    "external": {"eq": False},
    "rentable": {"eq": True},
}


class VastError(FleetAgentError):
    """A vast.ai call failed: what, where, the HTTP status and vast's own message."""

    def __init__(self, status: int | None = None, code: str | None = None, message: str = "",
                 retryable: bool = False, uncertain: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retryable = retryable
        # The request may have reached vast.ai and acted (a timeout after sending, a 5xx, a lost
        # answer): the outcome is unknown and must be settled by looking, never by re-sending.
        self.uncertain = uncertain

    def __repr__(self) -> str:
        return (f"VastError(status={self.status!r}, code={self.code!r}, message={self.message!r}, "
                f"retryable={self.retryable!r}, uncertain={self.uncertain!r})")


# --- typed results ---------------------------------------------------------------------------


def _int(v: Any) -> int | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        try:
            return int(float(v))
        except (TypeError, ValueError):
            return None


def _float(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


def _bool(v: Any) -> bool | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes", "verified")
    return bool(v)


def _first(d: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if d.get(k) is not None:
            return d[k]
    return None


MB_PER_GB = 1024.0


@dataclass(frozen=True)
class Instance:
    id: int
    label: str | None = None
    machine_id: int | None = None
    host_id: int | None = None
    actual_status: str | None = None
    intended_status: str | None = None
    cur_state: str | None = None
    status_msg: str | None = None
    num_gpus: int | None = None
    gpu_name: str | None = None
    gpu_util: float | None = None
    dph_total: float | None = None
    start_date: float | None = None
    disk_space: float | None = None
    reliability: float | None = None
    geolocation: str | None = None
    image: str | None = None
    ssh_host: str | None = None
    ssh_port: int | None = None
    is_bid: bool | None = None
    min_bid: float | None = None
    # Traffic billed so far (MB, as the official CLI's display reads the counters) and its $/GB prices.
    inet_up_billed: float | None = None
    inet_down_billed: float | None = None
    inet_up_cost: float | None = None
    inet_down_cost: float | None = None
    end_date: float | None = None  # epoch seconds the contract ends: the instance then stops and cannot start
    # The start of its machine's next maintenance window (epoch seconds), from GET /machines/maintenances: not
    # in the instance row; the tick sets it (agent/fleet/drain.py).
    maint_start: float | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def traffic_gb(self) -> tuple[float, float] | None:
        """(up, down) GB billed so far, or None when vast.ai sends no counters."""
        if self.inet_up_billed is None and self.inet_down_billed is None:
            return None
        return (self.inet_up_billed or 0.0) / MB_PER_GB, (self.inet_down_billed or 0.0) / MB_PER_GB

    @classmethod
    def from_api(cls, d: Mapping[str, Any]) -> Instance:
        iid = _int(d.get("id"))
        if iid is None:
            raise VastError(message=f"instance row without an id (keys: {sorted(d)[:12]})", code="bad_response")
        return cls(
            id=iid, label=_str(d.get("label")), machine_id=_int(d.get("machine_id")),
            host_id=_int(d.get("host_id")), actual_status=_str(d.get("actual_status")),
            intended_status=_str(d.get("intended_status")), cur_state=_str(d.get("cur_state")),
            status_msg=_str(d.get("status_msg")), num_gpus=_int(d.get("num_gpus")),
            gpu_name=_str(d.get("gpu_name")), gpu_util=_float(d.get("gpu_util")),
            dph_total=_float(d.get("dph_total")), start_date=_float(d.get("start_date")),
            disk_space=_float(d.get("disk_space")),
            reliability=_float(_first(d, "reliability2", "reliability")),
            geolocation=_str(d.get("geolocation")), image=_str(_first(d, "image_uuid", "image")),
            ssh_host=_str(d.get("ssh_host")), ssh_port=_int(d.get("ssh_port")), is_bid=_bool(d.get("is_bid")),
            min_bid=_float(d.get("min_bid")), inet_up_billed=_float(d.get("inet_up_billed")),
            inet_down_billed=_float(d.get("inet_down_billed")), inet_up_cost=_float(d.get("inet_up_cost")),
            inet_down_cost=_float(d.get("inet_down_cost")), end_date=_float(d.get("end_date")), raw=dict(d),
        )


@dataclass(frozen=True)
class Offer:
    id: int
    machine_id: int | None = None
    host_id: int | None = None
    num_gpus: int | None = None
    gpu_name: str | None = None
    gpu_ram: float | None = None
    dph_total: float | None = None
    min_bid: float | None = None
    reliability: float | None = None
    inet_down: float | None = None
    inet_up: float | None = None
    disk_space: float | None = None
    verified: bool | None = None
    geolocation: str | None = None
    score: float | None = None
    dlperf: float | None = None
    cuda_max_good: float | None = None
    duration: float | None = None  # seconds until the host's listing ends; a contract rented now ends then
    inet_up_cost: float | None = None  # $/GB the host bills for traffic up, on top of dph_total
    inet_down_cost: float | None = None  # ...and down
    maint_in: float | None = None  # seconds until its machine's next maintenance window (set by the fleet's search)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_api(cls, d: Mapping[str, Any]) -> Offer:
        oid = _int(_first(d, "id", "ask_contract_id"))
        if oid is None:
            raise VastError(message=f"offer row without an id (keys: {sorted(d)[:12]})", code="bad_response")
        verified = d.get("verified")
        if verified is None and d.get("verification") is not None:
            verified = d.get("verification") == "verified"
        return cls(
            id=oid, machine_id=_int(d.get("machine_id")), host_id=_int(d.get("host_id")),
            num_gpus=_int(d.get("num_gpus")), gpu_name=_str(d.get("gpu_name")),
            gpu_ram=_float(d.get("gpu_ram")), dph_total=_float(d.get("dph_total")),
            min_bid=_float(d.get("min_bid")),
            reliability=_float(_first(d, "reliability", "reliability2")),
            inet_down=_float(d.get("inet_down")), inet_up=_float(d.get("inet_up")),
            disk_space=_float(d.get("disk_space")), verified=_bool(verified),
            geolocation=_str(d.get("geolocation")), score=_float(d.get("score")),
            dlperf=_float(d.get("dlperf")), cuda_max_good=_float(d.get("cuda_max_good")),
            duration=_float(d.get("duration")), inet_up_cost=_float(d.get("inet_up_cost")),
            inet_down_cost=_float(d.get("inet_down_cost")), raw=dict(d),
        )


@dataclass(frozen=True)
class Maintenance:
    """A host's maintenance window on one machine: from ``start`` to ``end`` (epoch seconds) the machine is down
    and every instance on it with it."""
    machine_id: int
    start: float
    end: float
    category: str | None = None

    @classmethod
    def from_api(cls, d: Mapping[str, Any]) -> Maintenance | None:
        mid, start = _int(d.get("machine_id")), _float(d.get("start_time"))
        if mid is None or start is None:
            return None
        end = _float(d.get("end_time"))
        hours = _float(d.get("duration_hours"))
        if end is None:
            end = start + (hours or 0.0) * 3600.0
        return cls(machine_id=mid, start=start, end=end, category=_str(d.get("maintenance_category")))


@dataclass(frozen=True)
class PriceIncrease:
    """A host's pending price increase on a running contract (instance): the new rate applies after the
    contract's current end date if accepted; rejected or unanswered, the contract is not extended."""

    id: int
    instance_id: int
    host_id: int | None
    old_dph_gpu: float | None  # $/h, from the per-second prices vast.ai sends
    new_dph_gpu: float | None
    contract_end_date: float | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def share(self) -> float | None:
        """How much higher the new GPU price is (0.2 = +20 %); None when vast.ai sends no GPU prices."""
        if not self.old_dph_gpu or self.new_dph_gpu is None:
            return None
        return self.new_dph_gpu / self.old_dph_gpu - 1.0

    @classmethod
    def from_api(cls, d: Mapping[str, Any]) -> PriceIncrease:
        def per_h(key: str) -> float | None:
            v = _float(d.get(key))
            return None if v is None else v * 3600.0

        return cls(id=int(d["pending_price_increase_id"]), instance_id=_int(d.get("contract_id")) or 0,
                   host_id=_int(d.get("host_id")), old_dph_gpu=per_h("old_gpu_costpersec"),
                   new_dph_gpu=per_h("new_gpu_costpersec"), contract_end_date=_float(d.get("contract_end_date")),
                   raw=dict(d))


@dataclass(frozen=True)
class User:
    """The account. ``credit`` is what it can spend (the prepaid credit left; the official CLI shows it
    as dollars and vast.ai stops instances when it runs out); ``balance`` is the invoice balance, the
    charges not yet settled, which is not money to spend."""

    id: int | None
    balance: float | None
    credit: float | None
    email: str | None


def spendable(user: User) -> float | None:
    """What the account can spend: its credit (the balance only when vast.ai sends no credit)."""
    return user.credit if user.credit is not None else user.balance


@dataclass(frozen=True)
class RentOutcome:
    """What a rent call did. "unknown": the instance may exist; reconcile by label."""

    status: Literal["created", "rejected", "unknown"]
    instance_id: int | None = None
    error: str | None = None
    http_status: int | None = None


# --- the client ------------------------------------------------------------------------------


def _encode_query(params: Mapping[str, Any]) -> str:
    """Query string as the CLI builds it: each value JSON-encoded (strings as-is), quote_plus'd."""
    return "&".join(f"{k}={quote_plus(v if isinstance(v, str) else json.dumps(v))}" for k, v in params.items())


def _stringify(v: Any) -> Any:
    """Numbers go to vast as strings, as the CLI sends them; booleans and strings stay."""
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int | float):
        return str(v)
    if isinstance(v, list | tuple):
        return [_stringify(x) for x in v]
    return v


class VastClient:
    """vast.ai REST client; one instance per account. Use as a context manager or close()."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        max_attempts: int = 3,
        sleep: Callable[[float], None] = time.sleep,
        rng: Callable[[], float] = random.random,
        transport: httpx.BaseTransport | None = None,
        min_interval: float = DEFAULT_MIN_INTERVAL_S,
        monotonic: Callable[[], float] = time.monotonic,
        hold: Callable[[Callable[[], Any]], Any] | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.min_interval = max(0.0, float(min_interval))
        # monotonic time after which no wait is started (the tick's deadline); None = no limit
        self.deadline: float | None = None
        self._next_at: dict[str, float] = {}
        self._monotonic = monotonic  # pacing, back-off and the deadline run on this clock (and ``sleep``)
        self._pace_lock = threading.Lock()
        self.base_url = base_url.rstrip("/")
        self.__key = api_key
        self.timeout = timeout
        self.max_attempts = max_attempts
        self._sleep = sleep
        self._rng = rng
        # Called before every request is sent; raising sends nothing. The daemon sets it to its leadership
        # check (agent.runtime.leader), so a daemon that lost the fleet's lock makes no call.
        self.fence: Callable[[], None] | None = None
        import httpx

        self._http = httpx.Client(timeout=timeout, transport=transport,
                                  headers={"User-Agent": "fleet-agent/0.1"}, follow_redirects=False,
                                  event_hooks={"request": [self._fenced]})
        if hold is not None:  # and each write of a request to the socket (agent.httpfence)
            from agent.httpfence import fence_client

            fence_client(self._http, hold)
        self._get_headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}
        self._body_headers = {**self._get_headers, "Content-Type": "application/json"}

    def __repr__(self) -> str:
        return f"VastClient(base_url={self.base_url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> VastClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- transport ------------------------------------------------------------------------

    def _fenced(self, _request: httpx.Request) -> None:
        """The fence, as late as httpx allows: the request is built and goes to the wire next."""
        if self.fence is not None:
            self.fence()

    def _scrub(self, text: str) -> str:
        return text.replace(self.__key, "<redacted>") if self.__key else text

    def _url(self, path: str, params: Mapping[str, Any] | None) -> str:
        if not path.startswith("/api/v"):
            path = "/api/v0" + path
        url = self.base_url + path
        return url + "?" + _encode_query(params) if params else url

    def _backoff(self, delay: float) -> float:
        return delay * (0.75 + 0.5 * self._rng())

    def _pace(self, method: str, api_path: str) -> None:
        """Wait until this endpoint's last request is ``min_interval`` old (real time; the slot is
        reserved under a lock, so threads sharing the client queue up instead of colliding)."""
        if self.min_interval <= 0:
            return
        ep = f"{method} {_ID_SEGMENT.sub('/*', api_path)}"
        with self._pace_lock:
            now = self._monotonic()
            start = max(now, self._next_at.get(ep, 0.0))
            self._next_at[ep] = start + self.min_interval
        if start > now:
            self._sleep(start - now)

    def _within_deadline(self, wait: float) -> bool:
        return self.deadline is None or self._monotonic() + wait < self.deadline

    def _retry_wait(self, resp: httpx.Response, delay: float) -> float | None:
        """Seconds to wait before retrying resp, or None when it must not be retried."""
        if resp.status_code == 429 and _error_code(resp) == "search_quota_exceeded":
            return None
        header = resp.headers.get("Retry-After")
        if header is not None:
            try:
                wait = float(header)
            except ValueError:
                return self._backoff(delay)
            return wait if 0 <= wait <= MAX_RETRY_AFTER_S else None
        if resp.status_code == 429:  # no Retry-After (vast.ai sends none): seconds, not a blink
            return self._backoff(max(delay / FIRST_BACKOFF_S * FIRST_429_BACKOFF_S, self.min_interval))
        return self._backoff(delay)

    def _send(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
              body: Any = None, retry: bool = True, again_on_429: bool = False,
              timeout: float | None = None) -> httpx.Response:
        """One logical call: up to max_attempts HTTP requests. Raises VastError on transport failure.

        ``retry=False`` (a call that changes the fleet): sent once; sent again only when the
        connection was refused or never established, so nothing reached vast.ai, or, with
        ``again_on_429`` (a call that may be repeated: destroy, start/stop/label/reboot), when the rate
        limit refused it with a 429 before acting. Any other failure raises a VastError marked
        ``uncertain``."""
        import httpx

        url = self._url(path, params)
        api_path = url[len(self.base_url):].split("?", 1)[0]
        headers = self._get_headers
        content = None
        if method != "GET":
            content = json.dumps({} if body is None else body).encode()
            headers = self._body_headers
        attempts = self.max_attempts
        delay = FIRST_BACKOFF_S
        for attempt in range(1, attempts + 1):
            self._pace(method, api_path)
            try:
                resp = self._http.request(method, url, headers=headers, content=content,
                                          timeout=timeout if timeout is not None else self.timeout)
            except httpx.TransportError as e:
                kind = "timeout" if isinstance(e, httpx.TimeoutException) else "connection_error"
                unsent = isinstance(e, httpx.ConnectError | httpx.ConnectTimeout)
                if attempt >= attempts or not (retry or unsent):
                    raise VastError(message=f"{method} {api_path}: {kind} after {attempt} attempt(s): "
                                    f"{self._scrub(type(e).__name__)}", code=kind, retryable=True,
                                    uncertain=not (retry or unsent)) from None
                wait = self._backoff(delay)
                log.warning("vast.retry", method=method, path=api_path, status=None, error=kind,
                            attempt=attempt, wait_s=round(wait, 3))
                self._sleep(wait)
                delay *= BACKOFF_FACTOR
                continue
            again = retry or (again_on_429 and resp.status_code == 429)
            if again and resp.status_code in RETRYABLE_STATUS and attempt < attempts:
                retry_wait = self._retry_wait(resp, delay)
                if retry_wait is not None and self._within_deadline(retry_wait):
                    log.warning("vast.retry", method=method, path=api_path, status=resp.status_code,
                                attempt=attempt, wait_s=round(retry_wait, 3))
                    self._sleep(retry_wait)
                    delay *= BACKOFF_FACTOR
                    continue
            return resp
        raise AssertionError("unreachable")  # the loop always returns or raises

    def _error(self, resp: httpx.Response, what: str) -> VastError:
        code = _error_code(resp)
        msg = _error_msg(resp)
        retryable = resp.status_code in RETRYABLE_STATUS and code != "search_quota_exceeded"
        text = f"{what}: HTTP {resp.status_code}" + (f" {code}" if code else "") + (f": {msg}" if msg else "")
        return VastError(message=self._scrub(text), status=resp.status_code, code=code, retryable=retryable)

    def _call(self, method: str, path: str, what: str, **kw: Any) -> dict[str, Any]:
        resp = self._send(method, path, **kw)
        if resp.status_code >= 400:
            raise self._error(resp, what)
        try:
            data = resp.json()
        except ValueError:
            raise VastError(message=f"{what}: HTTP {resp.status_code} but the body is not JSON "
                            f"({self._scrub(resp.text[:120])!r})", status=resp.status_code,
                            code="bad_response") from None
        if not isinstance(data, dict):
            raise VastError(message=f"{what}: expected a JSON object, got {type(data).__name__}",
                            status=resp.status_code, code="bad_response")
        return data

    # -- instances ------------------------------------------------------------------------

    def list_instances(self) -> list[Instance]:
        """Every instance on the account: one logical list call, following next_token."""
        params: dict[str, Any] = {
            "select_filters": {},
            "order_by": [{"col": "id", "dir": "asc"}],
            "limit": PAGE_LIMIT,
        }
        out: list[Instance] = []
        for _ in range(MAX_PAGES):
            data = self._call("GET", "/api/v1/instances/", "list instances", params=params)
            out.extend(Instance.from_api(r) for r in data.get("instances") or [] if isinstance(r, dict))
            token = data.get("next_token")
            if not token:
                return out
            params["after_token"] = str(token)
        raise VastError(message=f"list instances: more than {MAX_PAGES} pages; giving up", code="too_many_pages")

    def get_instance(self, instance_id: int) -> Instance | None:
        resp = self._send("GET", f"/instances/{int(instance_id)}/", params={"owner": "me"})
        if resp.status_code == 404:
            return None
        if resp.status_code >= 400:
            raise self._error(resp, f"show instance {instance_id}")
        try:
            row = resp.json().get("instances")
        except (ValueError, AttributeError):
            raise VastError(message=f"show instance {instance_id}: unreadable response", status=resp.status_code,
                            code="bad_response") from None
        if isinstance(row, list):
            row = row[0] if row else None
        return Instance.from_api(row) if isinstance(row, dict) else None

    # -- offers ---------------------------------------------------------------------------

    def search_offers(self, query: Mapping[str, Any], *, limit: int | None = None,
                      order: list[tuple[str, str]] | list[list[str]] | None = None,
                      type: str = "on-demand",  # noqa: A002 - vast's field name
                      allocated_storage: float = 5.0) -> list[Offer]:
        """Search the market. `query` maps field -> {op: value} (or a bare value for eq).

        ``allocated_storage`` (GB; the CLI's default is 5) is the disk the rent will ask for: vast.ai
        prices each offer's ``dph_total`` with it and shows only offers with that much disk."""
        body: dict[str, Any] = {k: dict(v) for k, v in DEFAULT_FILTERS.items() if k not in query}
        for key, cond in query.items():
            if key in ("order", "type", "limit", "allocated_storage"):
                raise ValueError(f"pass {key!r} as a keyword argument, not inside the query")
            ops = dict(cond) if isinstance(cond, Mapping) else {"eq": cond}
            if key == "gpu_name":
                ops = {op: (v.replace("_", " ") if isinstance(v, str) else
                            [x.replace("_", " ") if isinstance(x, str) else x for x in v]
                            if isinstance(v, list) else v) for op, v in ops.items()}
            body[key] = {op: _stringify(v) for op, v in ops.items()}
        body["order"] = [[str(f), str(d)] for f, d in (order or [("score", "desc")])]
        body["type"] = "bid" if type == "interruptible" else type
        if limit is not None:
            body["limit"] = int(limit)
        body["allocated_storage"] = float(allocated_storage)
        data = self._call("POST", "/bundles/", "search offers", body=body)
        return [Offer.from_api(r) for r in data.get("offers") or [] if isinstance(r, dict)]

    # -- money-moving -----------------------------------------------------------------------

    def rent(self, offer_id: int, *, image: str, disk: float, label: str, onstart: str | None,
             env: Mapping[str, str], price: float | None = None, runtype: str = "ssh",
             cancel_unavail: bool = False) -> RentOutcome:
        """Rent an offer. Never retried: a timeout, connection error or 5xx is "unknown".

        ``cancel_unavail=True``: when the machine cannot schedule the instance vast.ai refuses the
        rent; with False (the CLI's default) it creates a *stopped* instance that bills storage."""
        body = {
            "client_id": "me", "image": image, "env": dict(env), "price": price, "disk": float(disk),
            "label": label, "extra": None, "onstart": onstart, "image_login": None,
            "python_utf8": False, "lang_utf8": False, "use_jupyter_lab": False, "jupyter_dir": None,
            "force": False, "cancel_unavail": bool(cancel_unavail), "template_hash_id": None, "user": None,
            "runtype": runtype,
        }
        try:
            resp = self._send("PUT", f"/asks/{int(offer_id)}/", body=body, retry=False)
        except VastError as e:
            if not e.uncertain:  # the connection was refused every time: nothing reached vast.ai
                return RentOutcome("rejected", error=e.message)
            log.warning("vast.rent_unknown", offer_id=offer_id, label=label, error=e.code)
            return RentOutcome("unknown", error=e.message)
        status = resp.status_code
        if status >= 500:
            err = self._error(resp, f"rent offer {offer_id}")
            log.warning("vast.rent_unknown", offer_id=offer_id, label=label, status=status)
            return RentOutcome("unknown", error=err.message, http_status=status)
        if status >= 400:
            return RentOutcome("rejected", error=self._error(resp, f"rent offer {offer_id}").message,
                               http_status=status)
        try:
            data = resp.json()
        except ValueError:
            return RentOutcome("unknown", error=f"rent offer {offer_id}: HTTP {status} with an unreadable body",
                               http_status=status)
        new_id = _int(data.get("new_contract")) if isinstance(data, dict) else None
        if isinstance(data, dict) and data.get("success") and new_id is not None:
            return RentOutcome("created", instance_id=new_id, http_status=status)
        if isinstance(data, dict) and data.get("success") is False:
            msg = self._scrub(str(data.get("msg") or data.get("error") or "refused"))
            return RentOutcome("rejected", error=f"rent offer {offer_id}: {msg}", http_status=status)
        return RentOutcome("unknown", error=f"rent offer {offer_id}: HTTP {status} without new_contract",
                           http_status=status)

    def destroy(self, instance_id: int) -> bool:
        """Destroy an instance, sending the request once (again after a 429: the rate limit refused it).
        Already gone (404) counts as success. A 5xx or a lost answer raises a VastError marked ``uncertain``:
        settle it by looking."""
        resp = self._send("DELETE", f"/instances/{int(instance_id)}/", body={}, retry=False, again_on_429=True)
        if resp.status_code == 404 or (400 <= resp.status_code < 500 and _gone(resp)):
            return True
        if resp.status_code >= 400:
            raise self._write_error(resp, f"destroy instance {instance_id}")
        data = _json_or_empty(resp)
        if data.get("success") is False and _gone(resp):
            return True
        if data.get("success") is False:
            raise VastError(message=self._scrub(f"destroy instance {instance_id}: {data.get('msg') or 'refused'}"),
                            status=resp.status_code, code=_str(data.get("error")))
        return True

    def _write_error(self, resp: httpx.Response, what: str) -> VastError:
        """The error of a call that changes the fleet: uncertain on a 5xx (vast.ai may have acted)."""
        err = self._error(resp, what)
        err.uncertain = resp.status_code >= 500
        return err

    def _put_instance(self, path: str, body: dict[str, Any], what: str) -> None:
        """start, stop, label, reboot: sent once, again after a 429 (see ``_send``); a 5xx is ``uncertain``."""
        resp = self._send("PUT", path, body=body, retry=False, again_on_429=True)
        if resp.status_code >= 400:
            raise self._write_error(resp, what)
        data = _json_or_empty(resp)
        if data.get("success") is False:
            raise VastError(message=self._scrub(f"{what}: {data.get('msg') or data.get('error') or 'refused'}"),
                            code=_str(data.get("error")))

    def start(self, instance_id: int) -> None:
        self._put_instance(f"/instances/{int(instance_id)}/", {"state": "running"}, f"start instance {instance_id}")

    def stop(self, instance_id: int) -> None:
        self._put_instance(f"/instances/{int(instance_id)}/", {"state": "stopped"}, f"stop instance {instance_id}")

    def set_label(self, instance_id: int, label: str) -> None:
        self._put_instance(f"/instances/{int(instance_id)}/", {"label": label}, f"label instance {instance_id}")

    def reboot(self, instance_id: int) -> None:
        self._put_instance(f"/instances/reboot/{int(instance_id)}/", {}, f"reboot instance {instance_id}")

    def change_bid(self, instance_id: int, price: float) -> None:
        """An interruptible instance's new bid ($/h), as ``vastai change bid`` sends it."""
        self._put_instance(f"/instances/bid_price/{int(instance_id)}/", {"client_id": "me", "price": float(price)},
                           f"change bid of instance {instance_id}")

    # -- price increases on running contracts -------------------------------------------------

    def pending_price_increases(self) -> list[PriceIncrease]:
        """The hosts' pending price increases on our running contracts."""
        data = self._call("GET", "/instances/pending-price-increases/", "show pending price increases")
        return [PriceIncrease.from_api(r) for r in data.get("pending_price_increases") or []
                if isinstance(r, dict) and _int(r.get("pending_price_increase_id")) is not None]

    def maintenances(self, machine_ids: list[int]) -> list[Maintenance]:
        """The machines' maintenance windows not over yet (GET /machines/maintenances, as the official CLI's
        ``show maints`` asks: ``owner=me`` and the ids as a JSON list); vast.ai answers a JSON list."""
        if not machine_ids:
            return []
        what = "show maintenances"
        resp = self._send("GET", "/machines/maintenances",
                          params={"owner": "me", "machine_ids": sorted({int(m) for m in machine_ids})})
        if resp.status_code >= 400:
            raise self._error(resp, what)
        try:
            data = resp.json()
        except ValueError:
            raise VastError(message=f"{what}: HTTP {resp.status_code} but the body is not JSON", code="bad_response",
                            status=resp.status_code) from None
        rows = data if isinstance(data, list) else (data.get("maintenances") if isinstance(data, dict) else None)
        if not isinstance(rows, list):
            raise VastError(message=f"{what}: expected a JSON list, got {type(data).__name__}", code="bad_response",
                            status=resp.status_code)
        return [m for r in rows if isinstance(r, dict) and (m := Maintenance.from_api(r)) is not None]

    def answer_price_increase(self, pending_id: int, *, accept: bool) -> bool:
        """Accept or reject one pending row (the body is exactly its id). False when it is no longer pending
        (vast.ai answers 404 no_pending_price_increase, older backends 409)."""
        what = "accept" if accept else "reject"
        resp = self._send("PUT", f"/instances/{what}-price-increase/",
                          body={"pending_price_increase_id": int(pending_id)}, retry=False)
        if resp.status_code in (404, 409):
            return False
        if resp.status_code >= 400:
            raise self._write_error(resp, f"{what} price increase {pending_id}")
        return True

    # -- logs and account -------------------------------------------------------------------

    def logs(self, instance_id: int, tail: int = 100, *, max_polls: int = LOG_POLLS,
             poll_interval: float = LOG_POLL_INTERVAL_S) -> str:
        """The instance's last `tail` log lines: request them, then poll result_url (no auth) as the
        official client does, up to ``max_polls`` times ``poll_interval`` apart, never past ``deadline``."""
        what = f"logs of instance {instance_id}"
        import httpx

        data = self._call("PUT", f"/instances/request_logs/{int(instance_id)}/", what, body={"tail": str(tail)})
        url = data.get("result_url")
        if not url:
            raise VastError(message=self._scrub(f"{what}: no result_url ({data.get('msg') or 'no message'})"),
                            code="no_result_url")
        for _ in range(max_polls):
            if not self._within_deadline(poll_interval):
                raise VastError(message=f"{what}: not ready before the tick's deadline", code="logs_timeout",
                                retryable=True)
            self._sleep(poll_interval)
            try:
                resp = self._http.get(str(url))  # a pre-signed URL: no auth, like the CLI
            except httpx.TransportError as e:
                log.warning("vast.logs_poll_failed", instance_id=instance_id, error=type(e).__name__)
                continue
            if resp.status_code == 200:
                return resp.text
        raise VastError(message=f"{what}: not ready after {max_polls} polls", code="logs_timeout", retryable=True)

    def current_user(self) -> User:
        data = self._call("GET", "/users/current", "show user")
        return User(id=_int(data.get("id")), balance=_float(data.get("balance")),
                    credit=_float(data.get("credit")), email=_str(data.get("email")))


def _json_or_empty(resp: httpx.Response) -> dict[str, Any]:
    try:
        data = resp.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _gone(resp: httpx.Response) -> bool:
    """The answer says the instance does not exist (already destroyed), whatever its status code."""
    return _error_code(resp) == "no_such_instance"


def _error_code(resp: httpx.Response) -> str | None:
    return _str(_json_or_empty(resp).get("error")) or None


def _error_msg(resp: httpx.Response) -> str:
    data = _json_or_empty(resp)
    if data:
        return str(data.get("msg") or data.get("error") or "")[:300]
    return resp.text.strip()[:300]
