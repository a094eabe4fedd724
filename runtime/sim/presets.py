"""Hardware × model presets for the simulator: which are fitted to measurements, which are estimates.

Two kinds (``Preset.source``):

* ``"fitted"`` — the linear part (``a``, ``b``, ``b_small``/``small_n``: every GEMM, norm and
  residual add) is fitted by :mod:`.profiles` to Vidur's measured per-operator GPU profiles
  (``../shared/data/vidur-profiles``; ``benchmarks/fit_presets.py`` reproduces the numbers
  below). The profiles hold no attention kernels, LM head, sampling or launch time, so ``c``
  (KV bytes / 75% of HBM bandwidth), ``d`` (attention FLOPs per query·key pair) and the LM
  head + ~0.3 ms added to ``a`` stay spec-derived ESTIMATES — said in each preset's note.
* ``"estimate"`` — every coefficient from public specifications (HBM bandwidth at 75%, dense
  BF16 FLOPs, weight and KV sizes; the serving notes §5.3), ±20–30%. :func:`estimated`
  derives them from a :class:`Hardware` and an :class:`Architecture`; the KV-LIMITED presets
  (``a10-r1-distill-qwen-7b``: a 24 GB card holding a 7B model; ``h100-r1-distill-qwen-32b-fp8``:
  an 80 GB card holding a 32B model) are built that way, and the note of each gives its inputs.

Policy rankings need only the model's shape (large fixed per-step cost, decode linear in KV
read, hard KV capacity, prefix reuse); absolute times need a fitted preset.

Example:
    >>> p = get_preset("h200-r1-distill-qwen-7b")
    >>> p.estimate, p.source, p.kv_capacity
    (True, 'estimate', 1800000)
    >>> get_preset("a100-llama-3.1-8b").source
    'fitted'
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
    source: str = "estimate"  # "fitted": linear part fitted to measured profiles (see the note)


@dataclass(frozen=True, slots=True)
class Hardware:
    """Public specifications of one GPU (BF16, TP=1)."""

    name: str
    hbm_gb: float
    bandwidth: float  # bytes/s
    attention_flops: float  # effective FLOP/s of attention kernels (~40-65% of dense peak)


@dataclass(frozen=True, slots=True)
class Architecture:
    """What the spec-derived terms need of a model: layers, heads, KV heads, width, vocabulary."""

    name: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    vocab: int
    weight_gb: float

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * 2  # K and V, BF16


H100 = Hardware("H100 SXM 80GB", 80, 3.35e12, 400e12)
A100 = Hardware("A100 SXM 80GB", 80, 2.039e12, 200e12)
H200 = Hardware("H200 SXM 141GB", 141, 4.8e12, 400e12)
A10 = Hardware("A10 24GB", 24, 600e9, 62e12)  # GDDR6 600 GB/s; attention ~50% of 125 TFLOPS BF16 dense
QWEN_7B = Architecture("DeepSeek-R1-Distill-Qwen-7B", 28, 28, 4, 128, 3584, 152_064, 15.2)  # Qwen2.5-7B shape
QWEN_32B = Architecture("DeepSeek-R1-Distill-Qwen-32B", 64, 40, 8, 128, 5120, 152_064, 65.5)  # Qwen2.5-32B shape
LLAMA_2_7B = Architecture("Llama-2-7B", 32, 32, 32, 128, 4096, 32_000, 13.5)
LLAMA_3_8B = Architecture("Llama-3.1-8B", 32, 32, 8, 128, 4096, 128_256, 16.1)


def lm_head_ms(hw: Hardware, arch: Architecture) -> float:
    """Spec-derived per-iteration time the profiles miss: reading the LM head, plus ~0.3 ms sampling and launch."""
    return arch.hidden * arch.vocab * 2 / (0.75 * hw.bandwidth) / _MS + 0.3


def fitted(name: str, hw: Hardware, arch: Architecture, *, a_ms: float, b_ms: float, b_small_ms: float,
           small_n: int, fit_note: str) -> Preset:
    """A preset whose linear part was fitted to a profile; attention, LM head and KV pool from specs."""
    extra_ms = lm_head_ms(hw, arch)
    c_ms = arch.kv_bytes_per_token / (0.75 * hw.bandwidth) / _MS
    d_ms = 4 * arch.layers * arch.heads * arch.head_dim / hw.attention_flops / _MS
    kv_capacity = int((0.88 * hw.hbm_gb - arch.weight_gb - 4) * 1e9 / arch.kv_bytes_per_token) // 1000 * 1000
    cost = CostModel(a=(a_ms + extra_ms) * _MS, b=b_ms * _MS, c=c_ms * _MS, d=d_ms * _MS,
                     b_small=b_small_ms * _MS, small_n=small_n)
    note = (f"linear part FITTED to {fit_note}; attention (c, d), LM head + 0.3 ms in a "
            f"({extra_ms:.2f} ms) and the KV pool are ESTIMATES from public specs")
    return Preset(name, hw.name, arch.name, cost, kv_capacity, arch.kv_bytes_per_token, estimate=False,
                  note=note, source="fitted")


def estimated(name: str, hw: Hardware, arch: Architecture, *, params_b: float, gemm_flops: float,
              weight_gb: float | None = None, overhead_gb: float = 4.0, what: str = "") -> Preset:
    """A preset with EVERY coefficient from public specs (``source="estimate"``).

    ``a`` = weights / 75% of HBM bandwidth + 0.3 ms (sampling, launch); ``b`` = 2·params /
    75% of ``gemm_flops`` per token (``b_small`` = 0.75·b up to 256 tokens); ``c`` = KV bytes
    per token / 75% of bandwidth; ``d`` = 4·layers·heads·head_dim / attention FLOP/s; KV pool
    = 0.88·HBM − weights − ``overhead_gb`` (activations, CUDA graphs). ``weight_gb``
    overrides the architecture's BF16 weights (e.g. FP8 weights); the KV cache stays BF16.
    """
    w = arch.weight_gb if weight_gb is None else weight_gb
    kvb = arch.kv_bytes_per_token
    a_ms = w * 1e9 / (0.75 * hw.bandwidth) / _MS + 0.3
    b_ms = 2 * params_b * 1e9 / (0.75 * gemm_flops) / _MS
    c_ms = kvb / (0.75 * hw.bandwidth) / _MS
    d_ms = 4 * arch.layers * arch.heads * arch.head_dim / hw.attention_flops / _MS
    kv = int((0.88 * hw.hbm_gb - w - overhead_gb) * 1e9 / kvb) // 1000 * 1000
    if kv <= 0:
        raise ConfigError(f"preset {name}: {arch.name} ({w} GB) leaves no KV pool on {hw.name}")
    cost = CostModel(a=a_ms * _MS, b=b_ms * _MS, c=c_ms * _MS, d=d_ms * _MS, b_small=0.75 * b_ms * _MS, small_n=256)
    note = (f"ESTIMATE from public specs ({hw.name}: {hw.hbm_gb:g} GB at {hw.bandwidth / 1e9:g} GB/s, "
            f"{gemm_flops / 1e12:g} TFLOP/s dense for GEMMs{what}; {arch.name}: {params_b:g}B params, {w:g} GB "
            f"weights, {kvb} B KV/token; 75% of peak bandwidth and FLOPs; KV pool 0.88·HBM − weights − "
            f"{overhead_gb:g} GB = {kv} tokens), ±20-30%, not fitted")
    return Preset(name, hw.name, arch.name, cost, kv, kvb, note=note)


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
    # KV-limited regimes (issue 19): the KV pool, not compute, fills under reasoning-length SC.
    estimated("a10-r1-distill-qwen-7b", A10, QWEN_7B, params_b=7.62, gemm_flops=125e12, overhead_gb=2.0,
              what=", BF16"),
    estimated("h100-r1-distill-qwen-32b-fp8", H100, QWEN_32B, params_b=32.8, gemm_flops=1979e12,
              weight_gb=32.8, what=", FP8 weights (BF16 does not leave a KV pool on 80 GB)"),
    # Fitted by `python benchmarks/fit_presets.py --profiles ../shared/data/vidur-profiles` (tests check it).
    fitted("h100-llama-2-7b", H100, LLAMA_2_7B, a_ms=5.416, b_ms=0.01857, b_small_ms=0.01455, small_n=512,
           fit_note="Vidur's H100 Llama-2-7B profile (N = 1-4096: mean error 4.8%, 92% of N within 10%)"),
    fitted("a100-llama-2-7b", A100, LLAMA_2_7B, a_ms=8.591, b_ms=0.05973, b_small_ms=0.04255, small_n=512,
           fit_note="Vidur's A100 Llama-2-7B profile (N = 1-4096: mean error 5.1%, 85% of N within 10%)"),
    fitted("a100-llama-3.1-8b", A100, LLAMA_3_8B, a_ms=9.369, b_ms=0.06540, b_small_ms=0.04680, small_n=512,
           fit_note="Vidur's A100 Llama-3-8B profile (N = 1-32768: mean error 3.1%, 91% of N within 10%; "
                    "the architecture of Llama-3.1-8B and DeepSeek-R1-Distill-Llama-8B)"),
)}


def get_preset(name: str) -> Preset:
    """The preset called ``name`` (see :data:`PRESETS`)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown simulator preset {name!r}", hint=f"choose one of {', '.join(PRESETS)}") from None


__all__ = ["A10", "A100", "Architecture", "H100", "H200", "Hardware", "LLAMA_2_7B", "LLAMA_3_8B", "PRESETS", "Preset",
           "QWEN_32B", "QWEN_7B", "estimated", "fitted", "get_preset", "lm_head_ms"]
