"""What the tests share, importable as ``helpers.*`` (``tests/`` is on ``sys.path`` through ``tests/conftest.py``).

- ``paths``: the repository's folders as the tests name them (``REPO``, ``TESTS``, ``HELPERS``, ``DATA``).
- ``isolation``: the variables every test clears (XDG, ``CONDUIT_*``, each adapter's declared ``env_vars``).
- ``toolfiles`` / ``toolsamples``: real-format tool files and profiles in a temporary HOME, the lifecycle helper.
- ``gateways`` / ``modelserver`` / ``sse_server``: loopback HTTP stand-ins for gateways and engines.
- ``agentproc`` / ``daemonproc`` / ``fallbackrig``: real ``conduit agent`` / ``conduit daemon`` processes.
- ``fake_vllm`` / ``planted_agent``: scripts run as subprocesses (a vLLM stand-in; a foreign socket owner).
- ``procs``: process-tree look-ups and CPU starvation (``cpu_wait_s``).
"""
