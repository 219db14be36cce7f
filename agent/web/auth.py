"""Who may write through the console: a bearer token, or a login cookie derived from it, plus CSRF.

Reading needs nothing. A write (ack, note) is allowed when

- the request carries ``Authorization: Bearer <token>`` (a browser never attaches that header on its
  own, so a forged cross-site form cannot carry it), or
- it carries the session cookie set by the login form AND a ``csrf`` form field matching that session.

The session cookie is ``nonce.HMAC(token, "session:" + nonce)`` and the CSRF value
``HMAC(token, "csrf:" + nonce)``: nothing is stored server-side, changing the token ends every session,
and neither value reveals the token. The cookie is HttpOnly and SameSite=Strict. Every comparison is
constant-time. The operator recorded on each action is ``http.token_name``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from agent.secrets import Secret

COOKIE = "fleet_agent_session"


@dataclass(frozen=True)
class Decision:
    """Whether a write may proceed; ``status`` and ``why`` when it may not."""

    ok: bool
    status: int = 200
    why: str = ""


class Auth:
    """The console's write token (None: the console is read-only) and the name actions are recorded under."""

    def __init__(self, token: Secret | None, name: str) -> None:
        self._token = token
        self.name = name

    @property
    def enabled(self) -> bool:
        return self._token is not None

    def _mac(self, msg: str) -> str:
        assert self._token is not None
        return hmac.new(self._token.reveal().encode(), msg.encode(), hashlib.sha256).hexdigest()

    def token_ok(self, given: str) -> bool:
        if self._token is None:
            return False
        return hmac.compare_digest(given.encode(), self._token.reveal().encode())

    def new_session(self) -> str:
        nonce = secrets.token_hex(16)
        return f"{nonce}.{self._mac('session:' + nonce)}"

    def session_nonce(self, cookie: str | None) -> str | None:
        """The nonce of a valid session cookie, else None."""
        if self._token is None or not cookie or "." not in cookie:
            return None
        nonce, _, sig = cookie.partition(".")
        return nonce if hmac.compare_digest(sig, self._mac("session:" + nonce)) else None

    def csrf_for(self, nonce: str) -> str:
        return self._mac("csrf:" + nonce)

    def bearer_ok(self, header: str | None) -> bool:
        if not header or not header.startswith("Bearer "):
            return False
        return self.token_ok(header[len("Bearer "):].strip())

    def check_write(self, *, authorization: str | None, cookie: str | None, csrf: str | None) -> Decision:
        """May this request write? (see the module doc)."""
        if self._token is None:
            return Decision(False, 403, "this console is read-only: no http.token_file or http.token_credential "
                            "is configured")
        if authorization is not None:
            if self.bearer_ok(authorization):
                return Decision(True)
            return Decision(False, 401, "the bearer token is wrong")
        nonce = self.session_nonce(cookie)
        if nonce is None:
            return Decision(False, 401, "log in with the console's token first (or send it as a bearer token)")
        if not csrf or not hmac.compare_digest(csrf, self.csrf_for(nonce)):
            return Decision(False, 403, "the form's CSRF field is missing or wrong; reload the page and try again")
        return Decision(True)
