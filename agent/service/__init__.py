"""The service: the daemon that runs ticks on a schedule under systemd, with the console beside it."""
