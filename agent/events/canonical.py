"""The log's canonical JSON: the one text every hash of the log and of a model request is taken over."""

from __future__ import annotations

import json
from typing import Any

from agent.errors import PayloadError


def canonical(obj: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, UTF-8, no NaN/Infinity."""
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError as e:
        raise PayloadError(f"payload is not valid JSON: {e}") from e
    except TypeError as e:
        raise PayloadError(f"payload is not JSON-serialisable: {e}") from e
    except RecursionError as e:
        raise PayloadError(f"payload is not valid JSON: it contains itself, or nests too deep ({e})") from e
