"""Running the real tools: a loopback recording gateway, an isolated one-shot run of a tool (network cut,
leftover processes reaped), each tool's one-shot command, and ``conduit verify`` built on them."""
