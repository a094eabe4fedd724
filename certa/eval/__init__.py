"""Evaluation tooling: datasets, the trace format, trace collection, replay, calibration and token benchmarks.

``datasets`` (dev problems from ``../shared/data``), ``traces`` (the JSONL trace format),
``collect`` (record traces with a real model), ``replay_backend`` / ``replay`` /
``replay_eval`` (run programs on recorded traces), ``calibration`` (choose a policy on one
split, report on the other), ``bench_tokens`` (tokens vs accuracy against the baselines),
``cot_grid`` (CoT rule grids) and ``evalstats`` (bootstrap confidence intervals). This layer
sits above ``certa.algorithms``.
"""
