"""The runtime: a tick, the daemon that schedules ticks, leadership, locks and systemd."""
