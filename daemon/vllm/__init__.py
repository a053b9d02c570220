"""Supervising a local vLLM server, and explaining what it does: the agent runs one ``supervisor.Supervisor``.

Entry points: ``supervisor.Supervisor`` (launch, readiness, crashes, restarts, stop: one asyncio loop),
``settings.to_argv`` (the ``[vllm]`` table as flags for the installed version), ``diagnose.diagnose`` (one
reason and one fix from a failed start-up's log tail) and ``metrics.parse`` / ``metrics.MetricsTracker``
(``/metrics``).

- ``supervisor`` / ``lifecycle`` / ``messages`` / ``monitor``: the state machine, its enum and typed messages,
  per-launch watchers (exit, readiness, health, metrics).
- ``process`` / ``tree`` / ``adoption``: the process group, every process a launch started, handing over
  between agents.
- ``preflight`` / ``settings`` / ``gate`` / ``toolparser``: what a launch is decided from, before anything
  starts.
- ``diagnose`` / ``causes`` / ``distcauses`` / ``reports`` / ``logs``: failures recognised in vLLM's own
  words, what is reported (masked), the rotated log file.
- ``cluster`` / ``raynode``: one vLLM over several nodes, through Ray.
- ``observer`` / ``ollama``: an engine someone else runs (``[vllm] manage = false``), a vLLM or an Ollama, read
  over HTTP with the supervisor's face; nothing launched.
"""
