"""Fit the simulator presets' linear part to Vidur's measured GPU profiles, and check the spec estimates.

For every profile in ``--profiles`` (Vidur ``mlp.csv``: one transformer layer's non-attention
operators, measured on H100/A100 across token counts) this script

1. fits ``t(N) = a + b_small·N`` (``N ≤ small_n``) / ``a + b·N`` to ``layers × Σ ops + emb``
   (:func:`certa.runtime.sim.profiles.fit_linear`) and reports the mean / worst relative error
   over the profiled token counts and the share of token counts within 10%;
2. checks that the fitted presets in :mod:`certa.runtime.sim.presets` carry these numbers;
3. measures how far the spec-derived method of the serving notes (§5.3: layer weights / 75% of
   HBM bandwidth; 2·params FLOPs at 65% of dense BF16 peak; 0.75× per token for N ≤ 256) is
   from each profile — the method the ``estimate`` presets were built with.

Writes ``fit_presets.json`` and ``fit_presets.png`` (profile vs fit, residuals) into ``--out``.

    python benchmarks/fit_presets.py --profiles ../shared/data/vidur-profiles --out docs/results/presets
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from certa.runtime.sim.presets import (A100, H100, LLAMA_2_7B, LLAMA_3_8B, Architecture, Hardware, get_preset,
                                       lm_head_ms)
from certa.runtime.sim.profiles import fit_linear, profile_seconds, read_profile

# profile file → (hardware, architecture, preset fitted from it, parameters in the layers)
PROFILES = {
    "h100_Llama-2-7b-hf_mlp.csv.gz": (H100, LLAMA_2_7B, "h100-llama-2-7b", 6.48e9),
    "a100_Llama-2-7b-hf_mlp.csv.gz": (A100, LLAMA_2_7B, "a100-llama-2-7b", 6.48e9),
    "a100_Meta-Llama-3-8B_mlp.csv.gz": (A100, LLAMA_3_8B, "a100-llama-3.1-8b", 6.98e9),
}
PEAK_BF16 = {H100.name: 989e12, A100.name: 312e12}


def spec_linear(hw: Hardware, arch: Architecture, layer_params: float, n: np.ndarray) -> np.ndarray:
    """The serving notes' spec-derived linear part (seconds) for ``n`` tokens."""
    a = layer_params * 2 / (0.75 * hw.bandwidth)
    b = 2 * layer_params / (0.65 * PEAK_BF16[hw.name])
    return a + np.where(n <= 256, 0.75 * b, b) * n


def errors(pred: np.ndarray, meas: np.ndarray) -> dict:
    rel = np.abs(pred - meas) / meas
    return {"mean": float(rel.mean()), "median": float(np.median(rel)), "max": float(rel.max()),
            "within_10pct": float((rel <= 0.10).mean())}


def monotone_bound(t: np.ndarray) -> float:
    """The smallest worst-case relative error ANY non-decreasing model of ``t`` (sorted by N) must have.

    Where a larger token count was profiled faster than a smaller one (tile and wave effects),
    a model that never gets faster with more tokens errs by at least ``(t_i − t_j)/(t_i + t_j)``.
    """
    running_max, bound = t[0], 0.0
    for x in t[1:]:
        bound = max(bound, (running_max - x) / (running_max + x))
        running_max = max(running_max, x)
    return float(bound)


def matches(shipped: dict, fit: dict, tol: float = 0.005) -> bool:
    """Whether a preset carries the fitted coefficients (to ``tol`` relative)."""
    same = all(abs(shipped[k] - fit[k]) <= tol * abs(fit[k]) for k in ("a_ms", "b_ms", "b_small_ms"))
    return same and shipped["small_n"] == fit["small_n"]


def one(path: Path) -> tuple[dict, tuple]:
    hw, arch, preset_name, layer_params = PROFILES[path.name]
    rows = read_profile(path)
    fit = fit_linear(rows, arch.layers)
    n, t = profile_seconds(rows, arch.layers)
    pred = np.array([fit.predict(int(x)) for x in n])
    preset = get_preset(preset_name)
    shipped = {"a_ms": preset.cost.a * 1e3 - lm_head_ms(hw, arch), "b_ms": preset.cost.b * 1e3,
               "b_small_ms": (preset.cost.b_small or 0) * 1e3, "small_n": preset.cost.small_n}
    spec = spec_linear(hw, arch, layer_params, n)
    entry = {"profile": path.name, "hardware": hw.name, "model": arch.name, "layers": arch.layers,
             "preset": preset_name, "fit": fit.as_dict(), "fit_errors": errors(pred, t),
             "preset_linear_part": shipped,
             "fit_errors_decode_batches": errors(pred[n <= 256], t[n <= 256]),
             "any_monotone_model_max_error_at_least": monotone_bound(t),
             "preset_matches_fit": matches(shipped, fit.as_dict()),
             "spec_estimate_errors": errors(spec, t),
             "spec_estimate_ratio_median": float(np.median(spec / t))}
    return entry, (n, t, pred, spec)


def plot(curves: dict, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, len(curves), figsize=(5 * len(curves), 7), sharex="col")
    for col, (name, (n, t, pred, spec)) in enumerate(curves.items()):
        top, bottom = axes[0][col], axes[1][col]
        top.loglog(n, t * 1e3, ".", ms=3, label="profiled (Vidur)")
        top.loglog(n, pred * 1e3, "-", label="fitted preset")
        top.loglog(n, spec * 1e3, "--", label="spec estimate")
        top.set_title(name.replace("_mlp.csv.gz", ""), fontsize=9)
        top.set_ylabel("linear part of one iteration (ms)")
        bottom.semilogx(n, (pred - t) / t * 100, ".", ms=3, label="fit")
        bottom.semilogx(n, (spec - t) / t * 100, ".", ms=3, label="spec estimate")
        bottom.axhline(10, color="grey", lw=0.5)
        bottom.axhline(-10, color="grey", lw=0.5)
        bottom.set_ylabel("error (%)")
        bottom.set_xlabel("tokens in the iteration (N)")
        top.legend(fontsize=7)
        bottom.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default="../shared/data/vidur-profiles")
    ap.add_argument("--out", default="out/fit_presets")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    entries, curves = [], {}
    for name in PROFILES:
        path = Path(args.profiles) / name
        if not path.exists():
            print(f"skipped {name}: not in {args.profiles}")
            continue
        entry, curve = one(path)
        entries.append(entry)
        curves[name] = curve
        f, e, s = entry["fit"], entry["fit_errors"], entry["spec_estimate_errors"]
        dec = entry["fit_errors_decode_batches"]
        print(f"{entry['preset']:20s} a={f['a_ms']:.3f} ms b={f['b_ms']:.4f} b_small={f['b_small_ms']:.4f} "
              f"small_n={f['small_n']}  fit error mean {e['mean']:.1%} max {e['max']:.1%} "
              f"({e['within_10pct']:.0%} of N within 10%; N <= 256: mean {dec['mean']:.1%} max {dec['max']:.1%})  "
              f"(any monotone model: max >= {entry['any_monotone_model_max_error_at_least']:.1%})  "
              f"spec estimate mean {s['mean']:.1%} "
              f"max {s['max']:.1%}  preset matches fit: {entry['preset_matches_fit']}")
    report = {"what": "linear part of the simulator cost model fitted to Vidur's measured per-operator profiles "
                      "(no attention kernels in them: c and d stay spec-derived)",
              "command": "python benchmarks/fit_presets.py --profiles ../shared/data/vidur-profiles --out DIR",
              "presets": entries}
    (out / "fit_presets.json").write_text(json.dumps(report, indent=1))
    if curves:
        plot(curves, out / "fit_presets.png")
    print(f"wrote {out / 'fit_presets.json'}")


if __name__ == "__main__":
    main()
