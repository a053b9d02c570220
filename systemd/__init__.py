"""The systemd user units ``conduit service install`` writes (package data: ``conduit-sync.service``,
``conduit-agent.service``), read with ``importlib.resources.files("conduit.systemd")``."""
