"""A real MCP server for the tests, built with the ``mcp`` Python SDK (``MCPServer``): one tool with a name no
tool ships (``PROBE_TOOL``), so a model request that lists it proves the tool loaded this server.

Run: ``python mcp_probe_server.py stdio`` (stdin/stdout), or ``python mcp_probe_server.py http PORT`` (streamable
HTTP on 127.0.0.1:PORT, path ``/mcp``).
"""

from __future__ import annotations

import sys

PROBE_TOOL = "conduit_probe_7f3a"
"""The probe's one tool: a name found nowhere else."""


def main(argv: list[str]) -> None:
    from mcp.server.mcpserver import MCPServer  # the SDK, imported only by the server process

    server: MCPServer = MCPServer("conduit-probe")

    def probe(text: str) -> str:
        """Echo the text back (the tests never call it: listing it is the proof)."""
        return text

    server.tool(name=PROBE_TOOL)(probe)
    if argv[1] == "stdio":
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(argv[2]), streamable_http_path="/mcp")


if __name__ == "__main__":
    main(sys.argv)
