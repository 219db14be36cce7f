"""fleet-agent: a vast.ai GPU fleet run by an LLM on an append-only event log."""

__version__ = "0.1.0"
