"""A process that holds the fleet's leadership lock and acts while its fence passes (tests only).

    python -m tests.leader_driver file DATA_DIR AGENT_ID FAILOVER ACTS
    python -m tests.leader_driver pg DSN AGENT_ID FAILOVER ACTS

It waits for the lock, prints "acquired", heartbeats, and every 20 ms checks the fence and, when it
passes, appends one line to ACTS (its stand-in for an append or a vast.ai call). Once the fence says the
lock is lost it prints "lost: ..." and exits 3, having acted no more.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from agent.runtime.leader import FileLeader, LeadershipLost, PgLeader


def main(argv: list[str]) -> int:
    kind, target, agent_id, failover, acts = argv
    leader: FileLeader | PgLeader
    if kind == "file":
        leader = FileLeader(Path(target), agent_id, failover_seconds=float(failover))
    else:
        leader = PgLeader(target, agent_id, failover_seconds=float(failover))
    while not leader.try_acquire():
        time.sleep(0.05)
    print("acquired", flush=True)
    leader.start_heartbeat(lambda why: None)
    fd = os.open(acts, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    n = 0
    while True:
        try:
            leader.check()
        except LeadershipLost as e:
            print(f"lost: {e}", flush=True)
            return 3
        n += 1
        os.write(fd, f"act {n}\n".encode())
        time.sleep(0.02)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
