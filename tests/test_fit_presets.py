"""Fitting the simulator presets' linear part to Vidur-style GPU profiles."""

from __future__ import annotations

import csv
import gzip
import importlib.util
from pathlib import Path

import pytest

from certa.runtime.errors import ConfigError
from certa.runtime.sim.presets import get_preset
from certa.runtime.sim.profiles import LAYER_OPS, fit_linear, read_profile

PROFILES = Path(__file__).resolve().parents[2] / "shared" / "data" / "vidur-profiles"
BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "fit_presets.py"


def write_profile(path: Path, times: dict[int, float], tp: int = 1) -> None:
    """A Vidur-shaped mlp.csv.gz: ``times[n]`` ms per layer split evenly over the ops (emb 0)."""
    cols = [f"time_stats.{op}.{s}" for op in ("emb", *LAYER_OPS) for s in ("min", "max", "mean", "median", "std")]
    with gzip.open(path, "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols + ["num_tokens", "num_tensor_parallel_workers"])
        for n, ms in times.items():
            per_op = ms / len(LAYER_OPS)
            row = [0.0] * 5 + [per_op] * (5 * len(LAYER_OPS))
            w.writerow(row + [n, tp])
            w.writerow(row + [n, tp + 1])  # another TP degree: must be ignored


def test_fit_recovers_a_known_piecewise_linear_profile(tmp_path):
    # per layer: 0.1 ms + 0.0005 ms/token up to 256 tokens, 0.1 ms + 0.001 ms/token above
    times = {n: 0.1 + (0.0005 if n <= 256 else 0.001) * n for n in (1, 4, 16, 64, 128, 256, 512, 1024, 4096)}
    path = tmp_path / "h100_tiny_mlp.csv.gz"
    write_profile(path, times)
    rows = read_profile(path)
    assert [r.num_tokens for r in rows] == sorted(times) and all(r.tensor_parallel == 1 for r in rows)
    fit = fit_linear(rows, layers=10, candidates=(128, 256, 512))
    assert fit.small_n == 256 and fit.max_error < 1e-6
    assert fit.a == pytest.approx(1e-3) and fit.b_small == pytest.approx(5e-6) and fit.b == pytest.approx(1e-5)
    assert fit.predict(1024) == pytest.approx(10 * times[1024] * 1e-3)


def test_a_malformed_profile_row_is_a_coded_error(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("num_tokens,num_tensor_parallel_workers\n8,1\n")
    with pytest.raises(ConfigError, match=r"bad.csv:2") as err:
        read_profile(path)
    assert err.value.code == "CT300"


@pytest.mark.skipif(not PROFILES.is_dir(), reason="../shared/data/vidur-profiles is not beside the checkout")
def test_the_fitted_presets_carry_the_fit_of_the_shared_profiles():
    spec = importlib.util.spec_from_file_location("fit_presets", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for name in bench.PROFILES:
        entry, _ = bench.one(PROFILES / name)
        assert entry["preset_matches_fit"], entry["preset"]
        assert entry["fit_errors"]["mean"] < 0.10  # and every preset says it is fitted
        assert get_preset(entry["preset"]).source == "fitted"
