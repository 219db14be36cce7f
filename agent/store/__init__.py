"""Storage: the event log, its read models and every query against them."""
