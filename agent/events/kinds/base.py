"""The registry every kind module defines its kinds in, and the upcaster of a version that changed only
its rendering."""

from __future__ import annotations

from agent.events.event import JsonObject
from agent.events.vocabulary import Vocabulary

VOCABULARY = Vocabulary()


def same_shape(p: JsonObject) -> JsonObject:
    """The upcaster of a version that changed only the rendering: the payload is unchanged."""
    return p
