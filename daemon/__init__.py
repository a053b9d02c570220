"""conduit.daemon: profile, key sources, sync engine, CLI and agent."""
