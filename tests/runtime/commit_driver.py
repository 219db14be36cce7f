"""A daemon's append, suspended after its fence passed and before its COMMIT (tests only).

    python -m tests.runtime.commit_driver DATA_DIR DB guarded|unguarded

It takes the fleet's file lock, prints "acquired", and appends one event to the SQLite log DB with the
log's fence set to the lock's check followed by a SIGSTOP of itself: it stops at the worst moment, the
check passed and the COMMIT next. Once continued it commits through ``FileLeader.hold`` (guarded) or
directly (unguarded, as before the guard), prints "committed" and exits 0, or prints "refused: ..." and
exits 3.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from agent.runtime.leader import FileLeader, LeadershipLost
from agent.store.log import EventLog


def main(argv: list[str]) -> int:
    data_dir, db, mode = argv
    leader = FileLeader(Path(data_dir), "fleet-1", failover_seconds=30.0)
    if not leader.try_acquire():
        print(f"not acquired: {leader.holder()}", flush=True)
        return 1
    print("acquired", flush=True)

    def check_then_stop() -> None:
        leader.check()
        os.kill(os.getpid(), signal.SIGSTOP)

    with EventLog(db, create=False) as lg:
        lg.fence = check_then_stop
        if mode == "guarded":
            lg.commit_guard = leader.hold
        try:
            lg.append("daemon.stopped", {"reason": "resumed"}, "system")
        except LeadershipLost as e:
            print(f"refused: {e}", flush=True)
            return 3
    print("committed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
