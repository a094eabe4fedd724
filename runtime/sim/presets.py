"""Hardware × model presets for the simulator. ESTIMATES, not measurements.

Coefficients come from public specifications (HBM bandwidth at 75%, dense BF16 FLOPs,
weight and KV sizes) cross-checked against Vidur's H100 profiles; see
``docs/scheduling.md`` and the serving notes §5.3. Absolute times are ±20–30% until fitted
on the real engine (:mod:`.fit`); policy rankings need only the model's shape (large fixed
per-step cost, decode linear in KV read, hard KV capacity, prefix reuse).

Example:
    >>> p = get_preset("h200-r1-distill-qwen-7b")
    >>> p.estimate, p.kv_capacity
    (True, 1800000)
    >>> sorted(PRESETS)[0]
    'h100-llama-3.1-8b'
"""

from __future__ import annotations

from dataclasses import dataclass

from certa.runtime.errors import ConfigError
from certa.runtime.sim.cost_model import CostModel

_MS = 1e-3


@dataclass(frozen=True, slots=True)
class Preset:
    """A cost model plus KV pool size for one GPU × model (TP=1, BF16)."""

    name: str
    hardware: str
    model: str
    cost: CostModel
    kv_capacity: int  # tokens in the KV pool (≈ 0.88·HBM − weights − 4 GB)
    kv_bytes_per_token: int
    estimate: bool = True  # True: derived from specs, not measured
    note: str = "ESTIMATE from public specs (serving notes §5.3), ±20-30% until fitted"


def _p(name: str, hw: str, model: str, a: float, c: float, d: float, kv: int, kvb: int) -> Preset:
    cost = CostModel(a=a * _MS, b=0.020 * _MS, c=c * _MS, d=d * _MS, b_small=0.015 * _MS, small_n=256)
    return Preset(name, hw, model, cost, kv, kvb)


PRESETS: dict[str, Preset] = {p.name: p for p in (
    _p("h100-llama-3.1-8b", "H100 SXM 80GB", "Llama-3.1-8B", 6.5, 5.2e-5, 1.3e-6, 380_000, 131_072),
    _p("h200-llama-3.1-8b", "H200 SXM 141GB", "Llama-3.1-8B", 4.7, 3.6e-5, 1.3e-6, 790_000, 131_072),
    _p("h100-r1-distill-qwen-7b", "H100 SXM 80GB", "DeepSeek-R1-Distill-Qwen-7B", 6.3, 2.3e-5, 1.0e-6,
       890_000, 57_344),
    _p("h200-r1-distill-qwen-7b", "H200 SXM 141GB", "DeepSeek-R1-Distill-Qwen-7B", 4.5, 1.6e-5, 1.0e-6,
       1_800_000, 57_344),
)}


def get_preset(name: str) -> Preset:
    """The preset called ``name`` (see :data:`PRESETS`)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown simulator preset {name!r}", hint=f"choose one of {', '.join(PRESETS)}") from None


__all__ = ["PRESETS", "Preset", "get_preset"]
