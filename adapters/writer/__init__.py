"""The one writer: every change conduit makes to another program's files goes through this wing.

Adapters return targets (``conduit.adapters.base.TextTarget`` / ``SqliteTarget``: the file and a render
function); ``apply.Writer`` re-reads, renders, diffs (keys masked), backs up and replaces atomically.

- ``apply``: the write of one tool's targets (dry run, diff, modes, symlinks, the re-read before rename).
- ``snapshot``: what a re-read saw (bytes, mode, identity), so a save by another program in between is seen.
- ``exchange``: the ``RENAME_EXCHANGE`` swap that replaces a file without a window where it is missing.
- ``sqlite_apply``: one short ``BEGIN IMMEDIATE`` transaction with a busy timeout (CC Switch's database).
- ``backups`` / ``restore``: the last versions of each file under the state directory, and putting one back.
- ``results``: what a write reports (``WriteResult``), for sync, doctor and the daemon.
"""
