"""Text formats of other programs' files, read and edited so that everything conduit does not own keeps its bytes.

- ``jsonfile``: targets for strict JSON files (Claude Code, Cline, ...): merge, keep key order.
- ``jsonc``: JSON with comments and trailing commas: parse, and edit without moving comments.
- ``dotenvfile``: ``.env`` files (Gemini CLI, Codex), read with python-dotenv and edited by line.
- ``textformats``: targets for TOML (tomlkit) and YAML (ruamel.yaml), both round-trip.
- ``masking``: finding the keys in a tool file's text (structurally), so diffs and doctor show fingerprints.
- ``versions``: ``<tool> --version``, bounded and cached.
- ``trustedfolders``: Gemini CLI's ``trustedFolders.json`` (which folders it reads ``.env`` files in).
"""
