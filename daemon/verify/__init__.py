"""Running the real tools: a loopback recording gateway, an isolated one-shot run of a tool (network cut,
leftover processes reaped), each tool's one-shot command, and ``conduit verify`` built on them.

Entry point: ``verify.verify`` (each installed tool once against a loopback canary, in the user's own
environment: one ``ToolCheck`` per tool; ``verify.exit_code``).

- ``gateway`` / ``replies``: the recording gateway and its canned answers per wire protocol.
- ``runner`` / ``sandbox`` / ``shadow`` / ``dns``: the isolated run (network and mount namespaces, a NXDOMAIN
  resolver).
- ``tools`` / ``copyconfig`` / ``verdicts``: each tool's one-shot command, the temporary HOME, what a run
  means.
"""
