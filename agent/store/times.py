"""The log's timestamps as text: their home is ``agent.times``; re-exported here for the store's modules."""

from agent.times import utc_ts as utc_ts

__all__ = ["utc_ts"]
