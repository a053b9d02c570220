"""A small stand-in for vLLM's API server, for the transitions that are slow or impossible with real vLLM here.

Launched by the supervisor exactly like vLLM (``[vllm].command = [python, this file]``, then vLLM's flags);
standard library only. It prints vLLM's start-up lines, answers ``/health``, ``/v1/models``, ``/metrics`` and
``/v1/chat/completions`` on 127.0.0.1, and can start children named like vLLM's (``VLLM::EngineCore`` with a
``VLLM::Worker`` child, via ``/proc/self/comm``; the kernel keeps 15 characters) in its process group.

Behaviour from the environment:
    FAKE_VLLM_MODE        ok (default) | never_ready | exit_at_start | crash_after_ready | engine_death | health503
    FAKE_VLLM_STARTUP_S   seconds before the port opens (default 0.2)
    FAKE_VLLM_AFTER_S     seconds after ready before crash_after_ready / engine_death / health503 act (default 0.5)
    FAKE_VLLM_EXIT        exit status for exit_at_start / crash_after_ready (default 1)
    FAKE_VLLM_MESSAGE     a line printed before exiting at start (e.g. "OSError: [Errno 98] Address already in use")
    FAKE_VLLM_CHILDREN    1: start EngineCore + Worker children
    FAKE_VLLM_IGNORE_TERM 1: the children ignore SIGTERM (the supervisor must escalate to SIGKILL)
    FAKE_VLLM_ECHO_KEY    1: print the API key (``VLLM_API_KEY``) as a careless launcher would: bare, as
                          ``--api-key X``, ``api_key=X`` and ``Authorization: Bearer X``; also print
                          ``FAKE_VLLM_ECHO_BARE`` as it is and ``FAKE_VLLM_ECHO_FLAG`` in flag forms only
                          (``--api-key=X``, ``hf_token=X``). ``{key}`` in FAKE_VLLM_MESSAGE is the API key.
    FAKE_VLLM_TOKEN_S     a streamed chat completion (``"stream": true``) sends ``max_tokens`` tokens this many
                          seconds apart (default 0.01), at most ``--max-num-seqs`` answers at once (the rest
                          wait, as vLLM's batch cap makes them), with a usage chunk when asked
    FAKE_VLLM_SETSID      child: fork a child that calls ``os.setsid()`` (leaving the group and session) and
                          sleeps; orphan: the same from an intermediate process that then exits, so the sleeper
                          is re-parented (to the agent when it is a subreaper). Its pid goes to
                          ``FAKE_VLLM_PIDFILE`` when set.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _set_comm(name: str) -> None:
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(name[:15])
    except OSError:
        pass


def _child(role: str) -> None:
    _set_comm("VLLM::EngineCore" if role == "engine" else "VLLM::Worker")
    if os.environ.get("FAKE_VLLM_IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if role == "engine":
        worker = subprocess.Popen([sys.executable, __file__, "--fake-role=worker"], stdout=subprocess.PIPE)
        assert worker.stdout is not None
        worker.stdout.readline()  # the worker is named
    print("up", flush=True)  # tell the parent this process is named (and its worker started)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - nothing more goes to the parent's pipe
    while True:
        time.sleep(3600)


def _escape(how: str) -> None:
    """Fork a process that leaves the group and session (``setsid()``) and sleeps (see FAKE_VLLM_SETSID)."""
    pidfile = os.environ.get("FAKE_VLLM_PIDFILE")
    r, w = os.pipe()
    first = os.fork()
    if first == 0:
        os.close(r)
        if how == "orphan" and os.fork() != 0:
            os._exit(0)  # the intermediate exits: the sleeper is orphaned
        os.setsid()
        _set_comm("fake-escapee")
        if pidfile:
            with open(pidfile, "a") as f:
                f.write(f"{os.getpid()}\n")
        os.write(w, b"x")
        os.close(w)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        while True:
            time.sleep(3600)
    os.close(w)
    os.read(r, 1)  # the sleeper has left the session and written its pid
    os.close(r)
    if how == "orphan":
        os.waitpid(first, 0)


def _args(argv: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            out[k] = v
        elif a.startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[a[2:]] = argv[i + 1]
            i += 1
        elif a.startswith("--"):
            out[a[2:]] = "true"
        i += 1
    return out


class State:
    health = 200
    prompt_tokens = 0
    generation_tokens = 0
    requests = 0
    running = 0
    waiting = 0
    # prefix-cache counters (tokens) a streamed answer adds: 10 queried, 6 hit unless --no-enable-prefix-caching;
    # with --kv-offloading-size also 4 asked of the tier (external) and 3 found there
    cache = {"prefix_cache_queries": 0.0, "prefix_cache_hits": 0.0, "external_prefix_cache_queries": 0.0,
             "external_prefix_cache_hits": 0.0, "prompt_tokens_cached": 0.0}
    lock = threading.Lock()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1].startswith("--fake-role="):
        _child(sys.argv[1].split("=", 1)[1])
        return
    env = os.environ
    mode = env.get("FAKE_VLLM_MODE", "ok")
    startup = float(env.get("FAKE_VLLM_STARTUP_S", "0.2"))
    after = float(env.get("FAKE_VLLM_AFTER_S", "0.5"))
    code = int(env.get("FAKE_VLLM_EXIT", "1"))
    args = _args(sys.argv[1:])
    host, port = args.get("host", "127.0.0.1"), int(args.get("port", "8000"))
    model = args.get("model", "fake")
    served = args.get("served-model-name", model)
    key = args.get("api-key") or env.get("VLLM_API_KEY")
    pid = os.getpid()
    print(f"(APIServer pid={pid}) INFO fake vLLM, non-default args: {sys.argv[1:]}", flush=True)
    if env.get("FAKE_VLLM_ECHO_KEY") == "1":
        k, bare, flag = (env.get(v, "") for v in ("VLLM_API_KEY", "FAKE_VLLM_ECHO_BARE", "FAKE_VLLM_ECHO_FLAG"))
        print(f"launching with key {k} (and {bare})\nargs: --api-key {k} --port {port}\nconfig: api_key={k}, "
              f"hf_token={flag}\nheaders: {{'Authorization': 'Bearer {k}'}}\nextra: --api-key={flag}", flush=True)
    if env.get("FAKE_VLLM_SETSID") in ("child", "orphan"):
        _escape(env["FAKE_VLLM_SETSID"])
    if env.get("FAKE_VLLM_CHILDREN") == "1":
        engine = subprocess.Popen([sys.executable, __file__, "--fake-role=engine"], stdout=subprocess.PIPE)
        assert engine.stdout is not None
        engine.stdout.readline()  # EngineCore and its Worker exist before the port opens
    if mode == "exit_at_start":
        time.sleep(startup)
        message = env.get("FAKE_VLLM_MESSAGE", "RuntimeError: fake start-up failure")
        print(message.replace("{key}", env.get("VLLM_API_KEY", "")), flush=True)
        sys.exit(code)
    if mode == "never_ready":
        print(f"(APIServer pid={pid}) INFO loading weights forever", flush=True)
        while True:
            time.sleep(3600)
    time.sleep(startup)
    print(f"(EngineCore pid={pid}) INFO [kv_cache_utils.py:1] CPU KV cache size: 4,096 tokens, "
          "Maximum concurrency for 256 tokens per request: 16.00x", flush=True)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *a: object) -> None:
            print(f'INFO:     {self.address_string()} - "{self.requestline}" {a[1] if len(a) > 1 else ""}',
                  flush=True)

        def _send(self, status: int, body: object, ctype: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authed(self) -> bool:
            if key and self.headers.get("Authorization") != f"Bearer {key}":
                self._send(401, {"error": "Unauthorized"})
                return False
            return True

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/health":
                self._send(State.health, "" if State.health == 200 else {"error": "engine dead"})
            elif self.path == "/v1/models":
                if self._authed():
                    self._send(200, {"object": "list", "data": [{"id": served, "object": "model"}]})
            elif self.path == "/metrics":
                self._send(200, _metrics(served), "text/plain; version=0.0.4")
            else:
                self._send(404, {"error": "not found"})

        def _stream(self, body: dict[str, object]) -> None:
            """A streamed answer of ``max_tokens`` tokens, paced by FAKE_VLLM_TOKEN_S, under the slots."""
            n_tokens, pace = int(str(body.get("max_tokens") or 16)), float(env.get("FAKE_VLLM_TOKEN_S", "0.01"))
            with State.lock:
                State.waiting += 1
            with slots:
                with State.lock:
                    State.waiting, State.running, State.requests = State.waiting - 1, State.running + 1, \
                        State.requests + 1
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for _ in range(n_tokens):
                        time.sleep(pace)
                        chunk = {"object": "chat.completion.chunk", "model": served,
                                 "choices": [{"index": 0, "delta": {"content": "x "}, "finish_reason": None}]}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                    with State.lock:
                        State.prompt_tokens, State.generation_tokens = State.prompt_tokens + 10, \
                            State.generation_tokens + n_tokens
                        _count_cache(args)
                    if (body.get("stream_options") or {}).get("include_usage"):  # type: ignore[union-attr]
                        usage = {"prompt_tokens": 10, "completion_tokens": n_tokens, "total_tokens": 10 + n_tokens}
                        self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                    self.close_connection = True
                finally:
                    with State.lock:
                        State.running -= 1

        def do_POST(self) -> None:  # noqa: N802
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n)
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            if not isinstance(body, dict):
                body = {}
            if self.path == "/v1/chat/completions" and body.get("stream") and self._authed():
                self._stream(body)
            elif self.path == "/v1/chat/completions" and self._authed():
                State.requests += 1
                State.prompt_tokens += 10
                State.generation_tokens += 5
                self._send(200, {"id": "fake", "object": "chat.completion", "model": served,
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                              "finish_reason": "length"}],
                                 "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
            elif self.path != "/v1/chat/completions":
                self._send(404, {"error": "not found"})

    slots = threading.Semaphore(int(args.get("max-num-seqs", "256")))
    server = ThreadingHTTPServer((host, port), Handler)
    print(f"(APIServer pid={pid}) INFO [entry.py:140] Starting vLLM server on http://{host}:{port}", flush=True)
    print("INFO:     Application startup complete.", flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: (print("INFO:     Shutting down", flush=True), os._exit(0)))
    if mode == "ok":
        while True:
            time.sleep(3600)
    time.sleep(after)
    if mode == "crash_after_ready":
        print("RuntimeError: fake crash", flush=True)
        os._exit(code)
    State.health = 503
    print("ERROR EngineCore encountered a fatal error. EngineDeadError", flush=True)
    if mode == "engine_death":
        time.sleep(float(env.get("FAKE_VLLM_503_S", "1.0")))
        os._exit(0)
    while True:  # health503: alive, answering 503 forever
        time.sleep(3600)


def _count_cache(args: dict[str, str]) -> None:
    """One answer's prefix-cache counts (``State.cache``), as vLLM's flags would make them."""
    hits = 0.0 if "no-enable-prefix-caching" in args else 6.0
    ext_q, ext_h = (4.0, 3.0) if "kv-offloading-size" in args else (0.0, 0.0)
    for key, add in (("prefix_cache_queries", 10.0), ("prefix_cache_hits", hits),
                     ("external_prefix_cache_queries", ext_q), ("external_prefix_cache_hits", ext_h),
                     ("prompt_tokens_cached", hits + ext_h)):
        State.cache[key] += add


def _metrics(served: str) -> str:
    lab = f'engine="0",model_name="{served}"'
    lines = [
        "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} {float(State.running)}",
        "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{lab}}} {float(State.waiting)}",
        "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{lab}}} 0.0",
        "# TYPE vllm:prompt_tokens counter", f"vllm:prompt_tokens_total{{{lab}}} {float(State.prompt_tokens)}",
        "# TYPE vllm:generation_tokens counter",
        f"vllm:generation_tokens_total{{{lab}}} {float(State.generation_tokens)}",
        "# TYPE vllm:time_to_first_token_seconds histogram",
        f'vllm:time_to_first_token_seconds_bucket{{{lab},le="0.1"}} {float(State.requests)}',
        f'vllm:time_to_first_token_seconds_bucket{{{lab},le="+Inf"}} {float(State.requests)}',
        f"vllm:time_to_first_token_seconds_count{{{lab}}} {float(State.requests)}",
        f"vllm:time_to_first_token_seconds_sum{{{lab}}} {0.05 * State.requests}",
    ]
    for name, value in State.cache.items():
        lines += [f"# TYPE vllm:{name} counter", f"vllm:{name}_total{{{lab}}} {value}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
