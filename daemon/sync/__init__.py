"""Every tool's files kept in line with the profile: once (``conduit sync``) or always (``conduit daemon``).

Entry points: ``engine.sync`` (profile -> per-tool settings -> adapter targets -> the one writer, a
``SyncReport``), ``doctor.doctor`` (per tool: found, version, in sync, and what outranks conduit),
``syncd.run_daemon`` (the daemon process), ``init.init_profile`` and ``rotate.rotate_key``.

- ``engine`` / ``drift`` / ``state``: one sync, conduit's own writes told from drift, the state file
  ``sync.json``.
- ``doctor`` / ``outrank``: what each tool will really use, and who wins over conduit.
- ``syncd`` / ``loop`` / ``watcher`` / ``lock`` / ``progress`` / ``logs``: the daemon: one loop thread fed by
  watchdog events on the directories that matter, one daemon per user, systemd's watchdog, masked logs.
- ``routed`` / ``catalogs``: when the agent's routing decision or a new model list means a sync.
- ``init`` / ``rotate`` / ``scrub``: a starter profile, key rotation, old keys out of the backups.
"""
