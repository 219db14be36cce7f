"""Where the event log lives: a SQLite file (a ``Path``) or a fleet in a PostgreSQL database (``PgTarget``).

This module imports no database driver: SQLite users never load psycopg. ``storage.url`` in the
config (agent/config.py) becomes one of these; ``EventLog`` takes either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

from agent.errors import ConfigError
from agent.secrets import Secret

PG_SCHEMES = ("postgresql", "postgres")
# As text: compiled (and cached by re) when a PostgreSQL target is first made; every command that opens a
# SQLite log imports this module.
_AGENT_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


def is_pg_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in PG_SCHEMES and "://" in url


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a usable ``postgresql://`` URL (a password in it included), or None."""
    from urllib.parse import urlsplit

    try:
        u = urlsplit(url)
    except ValueError as e:
        return f"not a URL ({e}); write postgresql://USER@HOST:PORT/DATABASE"
    if u.password is not None:
        return ("a password in the URL is refused (it would sit in the config and in every message that names "
                "the URL); remove it and set storage.password_env, storage.password_file or "
                "storage.password_credential")
    if not u.path.strip("/"):
        return "the URL names no database; write postgresql://USER@HOST:PORT/DATABASE"
    return None


@dataclass(frozen=True)
class PgTarget:
    """One fleet's log in a PostgreSQL database.

    ``url`` holds no password (refused by ``url_problem``); ``password`` comes from the environment, a
    file or a systemd credential. ``state_dir``, when given, holds the local head and checkpoint files
    (the same truncation evidence and verification checkpoint a SQLite log keeps beside its file)."""

    url: str
    agent_id: str
    password: Secret | None = field(default=None, repr=False)
    state_dir: Path | None = None

    def __post_init__(self) -> None:
        problem = url_problem(self.url)
        if problem is not None:
            raise ConfigError(f"storage.url: {problem}")
        if not re.match(_AGENT_ID, self.agent_id):
            raise ConfigError(f"agent_id {self.agent_id!r}: use letters, digits, '.', '_' or '-' (at most 63), "
                              "starting with a letter or digit")

    def __str__(self) -> str:
        return f"{self.url} (fleet {self.agent_id})"

    @property
    def head_file(self) -> Path | None:
        return None if self.state_dir is None else self.state_dir / f"pg-{self.agent_id}.head"

    @property
    def checkpoint_file(self) -> Path | None:
        return None if self.state_dir is None else self.state_dir / f"pg-{self.agent_id}.verified"


LogLocation: TypeAlias = "Path | PgTarget"
