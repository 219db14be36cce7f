"""Where a database file's bytes go: each table's and index's share of the file (bench/storage.py).

Read through the standard library's ``sqlite3``, read-only, because its builds commonly carry the
``dbstat`` table and the bundled driver (agent.store.db) does not; nothing here writes, so the reason
every writing connection goes through that driver does not apply.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

MIN_PAGES = 4
"""Tables and indexes under this many pages are left out (the empty read models of a short run)."""


def bytes_by_table(db: Path) -> dict[str, int]:
    """Bytes of ``db`` each table and index takes, largest first (a full-text index's shadow tables under
    their own names); {} when this Python's sqlite3 has no ``dbstat``. Checkpoint the WAL first."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT name, SUM(pgsize) AS b, COUNT(*) AS pages FROM dbstat GROUP BY name "
                            "ORDER BY b DESC").fetchall()
    except sqlite3.OperationalError:  # built without SQLITE_ENABLE_DBSTAT_VTAB
        return {}
    finally:
        conn.close()
    return {str(n): int(b) for n, b, pages in rows if pages >= MIN_PAGES}
