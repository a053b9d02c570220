"""The profile and what it resolves to: the layer every daemon package reads its settings through.

Entry points: ``profile.load_profile`` (the validated ``LoadedProfile``, errors naming file, line, key and
fix) and ``resolve.Resolver`` (per tool: the channel's roots, its cleaned key, the model: the ``ToolSettings``
an adapter receives).

- ``profile`` / ``fields`` / ``vllm`` / ``cluster`` / ``fallback``: the profile's tables as pydantic models.
- ``normalize``: base URLs into one canonical ``Root``, keys into a clean key (``normalize_base_url``,
  ``clean_key``).
- ``sources`` / ``keycommand`` / ``secrets``: key sources (env, file, command, conduit's secrets file) and
  reading them.
- ``resolve`` / ``routing``: from the profile to each tool's settings, under the agent's primary/fallback
  decision.
- ``edit``: writing the profile (``conduit use``: only the keys set change, comments kept).
- ``lines`` / ``tomlwords`` / ``valuewords``: profile errors in plain words, with the line they are on.
- ``paths`` / ``redaction``: where conduit keeps its files; the process-wide ``Redactor`` of every key read.
"""
