"""The HTTP side: Prometheus metrics, a health endpoint and the operator console.

    console.py  what the pages show, read from the log (its own connection); writes through agent.feedback
    routes.py   Starlette routes and Jinja templates (autoescape on; a strict CSP, no inline script)
    auth.py     the write token: bearer header, or a login cookie derived from it, with CSRF
    metrics.py  prometheus_client collector folded incrementally from the log
    spend.py    spend today / this month and the spend-rate series, estimated from observations
    charts.py   the server-rendered SVG chart
    server.py   bind, then uvicorn: in a daemon thread, or in the foreground (``fleet-agent web``)

htmx is vendored in static/ from its npm package (htmx.org 2.0.11, BSD Zero Clause License); nothing is
fetched at run time.
"""

from agent.web.console import Console
from agent.web.server import WebServer

__all__ = ["Console", "WebServer"]
