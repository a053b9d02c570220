"""``conduit bench``: a streaming load test of one endpoint, over concurrency levels or request rates.

Entry point: ``runner.run_sweep`` (a ``BenchConfig`` -> a ``SweepResult``: one summary per level), then
``outputs.write_outputs`` (the table, the saturation point and ``max_num_seqs`` advice, JSON / CSV / PNG
files).

- ``target`` / ``prompts`` / ``sizing``: what is measured, with which prompts, sized in the server's own
  tokens.
- ``runner`` / ``arrivals`` / ``wire``: requests sent closed-loop or open-loop, over both streaming wire
  protocols.
- ``stats`` / ``servercheck``: TTFT, TPOT, ITL, goodput; whether the server's ``/metrics`` agree with the
  client.
- ``outputs`` / ``resultfile`` / ``compare``: what people read, ``vllm bench serve``-shaped result files, two
  targets.
"""
