"""Requests built as ``httpx.Client.build_request`` builds them, for less CPU per request.

``Client.request`` parses the URL string on every call, merges it with the client's ``base_url``, copies and
normalises the client's headers into the request's, and merges the cookie jar. For a client that calls the
same few URLs every tick with the same headers, ``Prepared.build`` keeps what does not change:

- the parsed URL of each URL string (httpx's own parse, the first time: ``build_request``; its ``URL`` is
  immutable, so later requests share it), at most ``MAX_URLS`` of them;
- the client's headers merged with the call's (the same merge: a copy of the client's, updated by the
  call's, so names, values and their order are what ``build_request`` gives), once per header set;
- the timeout's ``as_dict``, once per value.

It falls back to ``build_request`` whenever the client holds a cookie (a server set one: the request
then carries it exactly as httpx sends it). The request sent is byte for byte what ``Client.request``
sends (tests/test_prepared_requests.py captures both on a raw socket), through ``Client.send``, so
auth, redirects, cookies from responses and the transport are httpx's own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import httpx

_LONG_DIGITS = re.compile(rb"\d{19}")
MAX_URLS = 256  # distinct URL strings kept parsed (a few endpoints, and ids: cleared when full)


class Prepared:
    """Builds requests for one ``httpx.Client`` (one that sets no ``base_url``, ``params`` or ``auth``)."""

    def __init__(self, client: httpx.Client) -> None:
        self._client = client
        self._urls: dict[str, httpx.URL] = {}
        self._timeouts: dict[float, dict[str, float | None]] = {}

    def headers(self, extra: Mapping[str, str] | None = None) -> httpx.Headers:
        """The client's headers merged with ``extra``, as ``build_request`` merges them (kept by the caller)."""
        merged = httpx.Headers(self._client.headers)
        merged.update(extra)
        return merged

    def build(self, method: str, url: str, headers: httpx.Headers, *, content: bytes | None = None,
              timeout: float) -> httpx.Request:
        """The request ``client.build_request(method, url, headers=..., content=..., timeout=timeout)`` builds,
        where ``headers`` came from ``self.headers(...)``."""
        parsed = self._urls.get(url)
        if parsed is None or self._client.cookies:
            req = self._client.build_request(method, url, headers=headers, content=content, timeout=timeout)
            if len(self._urls) >= MAX_URLS:
                self._urls.clear()
            self._urls[url] = req.url
            return req
        times = self._timeouts.get(timeout)
        if times is None:
            times = self._timeouts[timeout] = httpx.Timeout(timeout).as_dict()
        return httpx.Request(method, parsed, headers=headers, content=content, extensions={"timeout": dict(times)})


def json_body(resp: httpx.Response) -> Any:
    """``resp.json()``: the body decoded by orjson (a third of the json module's time on a search's
    offers), the json module deciding whatever orjson refuses (NaN, a lone surrogate, UTF-16, a byte
    order mark) and any body with a run of 19 digits (orjson reads an integer past 64 bits as a float),
    so the value and the errors are ``resp.json()``'s."""
    import orjson

    content = resp.content
    if _LONG_DIGITS.search(content) is not None:
        return json.loads(content)
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return json.loads(content)
