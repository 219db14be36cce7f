"""Real fakes for the tests: servers on 127.0.0.1 that speak the protocols fleet-agent talks."""
