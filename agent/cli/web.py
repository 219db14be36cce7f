"""`fleet-agent web`: the metrics, health and console pages without a daemon, read from the log.

For an operator on another account (read access to the data directory is enough to read; writes need
write access to the database and the console's token).
"""

from __future__ import annotations

import argparse
from typing import Any

from agent.cli import output
from agent.config import is_loopback, split_listen
from agent.errors import ConfigError, UsageError


def cmd_web(args: argparse.Namespace, app: Any) -> int:
    from agent.web import Console, WebServer  # the web stack: only for the command that serves it

    s = app.settings
    listen = args.listen or s.http.listen
    if listen is None:
        raise UsageError("http.listen is null in the config; pass --listen HOST:PORT (e.g. 127.0.0.1:9464)")
    try:
        host, _port = split_listen(listen)
    except ValueError as e:
        raise UsageError(f"--listen: {e}; write e.g. 127.0.0.1:9464") from None
    if not is_loopback(host) and s.http.token_file is None and s.http.token_credential is None:
        raise ConfigError(f"--listen {listen}: {host} is reachable beyond this machine and no token is set; set "
                          "http.token_file or http.token_credential, or listen on 127.0.0.1")
    r = app.log.verify_since_checkpoint()
    problem = None if r.ok else f"seq {r.first_bad_seq}: {r.reason}"
    console = Console(s, env=app.env, start_problem=problem)
    server = WebServer(console, listen)
    if problem:
        output.out(f"WARNING: the event log fails verification at {problem}; /healthz answers 503")
    output.out(f"serving {server.url} (metrics {server.url}/metrics, health {server.url}/healthz); "
               f"writes {'need the token' if console.auth.enabled else 'are off (no token configured)'}")
    server.serve()  # closes the console when it stops
    return 0
