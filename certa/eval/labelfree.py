r"""Label-free, risk-controlled calibration: the cheapest certaindex setting whose risk is certified.

The risk of an early exit is that its answer differs from what full compute would have
answered — observable on a deployment's own unlabeled traffic, no gold needed. Along a
program's family of settings (:mod:`certa.eval.families`: SC's StableVote ``delta``, CoT's
patience), every setting is replayed on traces whose labels were removed first and each
problem gets a loss (:mod:`certa.eval.outcomes`). Learn-then-Test then tests "risk >= ``risk``"
for each setting, most patient first, each at level ``delta``, stopping at the first it cannot
reject (:func:`certify`; :mod:`certa.eval.risk`); the cheapest certified setting is the policy.

**The guarantee.** If the problems the policy will serve and the calibration problems are
exchangeable (drawn alike, in any order), then with probability at least ``1 - delta`` over the
calibration set, every certified setting — hence the chosen one — has risk below ``risk`` on
that traffic: with ``reference="final"`` the share of runs whose answer differs from full
compute (which bounds the accuracy lost: a changed answer loses at most one right answer), with
``"consensus"`` (CoT) the accuracy lost measured against the other chains' answers. A problem
counts once (its chains or draw orders are averaged: they are not independent), so ``n``
loss-free problems certify at best ``1 - delta ** (1 / n)`` (:func:`~certa.eval.risk.smallest_certifiable`).
When nothing is certified the policy is the shipped default, and the file says so.

Example:
    >>> from certa.simulation.synth import synth_traces
    >>> out = calibrate_labelfree(synth_traces(40, seed=0, samples=8, probed=0), "sc", risk=0.2, orders=2)
    >>> out["program"], out["labelfree"]["certified"], out["policy"]["kind"]
    ({'name': 'sc'}, True, 'stable_vote')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from certa.eval.calibration import check_not_reserved
from certa.eval.families import family
from certa.eval.outcomes import Outcomes, Reference, outcomes
from certa.eval.risk import betting_pvalues, fixed_sequence, smallest_certifiable
from certa.eval.traces import TraceProblem
from certa.runtime.errors import ConfigError

__all__ = ["Certification", "calibrate_labelfree", "certify", "summarize"]


@dataclass(frozen=True)
class Certification:
    """Learn-then-Test on an :class:`~certa.eval.outcomes.Outcomes`: per setting its p-value,
    empirical risk and token ratio (vs full compute); the certified settings (a prefix of the
    family) and the cheapest of them (None: none certified)."""

    pvalues: list[float]
    risks: list[float]
    token_ratios: list[float]
    certified: list[int]
    chosen: int | None


def certify(out: Outcomes, risk: float, delta: float = 0.1, *, seed: int = 0) -> Certification:
    """Fixed-sequence testing of "risk >= ``risk``" for each setting of ``out``, most patient first,
    each at level ``delta`` with the betting test (:func:`~certa.eval.risk.betting_pvalues`; every
    setting's p-value is computed, only the fixed sequence's prefix is used)."""
    if not 0.0 < risk < 1.0 or not 0.0 < delta < 1.0:
        raise ConfigError(f"risk and delta must be in (0, 1), got {risk!r}, {delta!r}")
    n, cols = len(out.idx), range(len(out.values))
    pvalues = [float(p) for p in betting_pvalues(out.loss, risk, lower=out.lower, seed=seed)] if n else [1.0 for _ in cols]
    last = fixed_sequence(pvalues, delta)
    certified = list(range(last + 1)) if last is not None else []
    full = float(out.full_tokens.sum()) or 1.0
    ratios = [float(out.tokens[:, c].sum()) / full for c in cols]
    chosen = min(certified, key=lambda c: (ratios[c], c)) if certified else None
    risks = [float(out.loss[:, c].mean()) if n else 0.0 for c in cols]
    return Certification(pvalues, risks, ratios, certified, chosen)


def summarize(out: Outcomes, cert: Certification, program: str, *, risk: float, delta: float,
              reference: Reference) -> dict[str, Any]:
    """The policy file of a certification: ``policy``, ``program``, ``method: "labelfree"`` and
    ``labelfree`` (the setting, whether certified, each setting's empirical risk and p-value)."""
    fam = family(program)
    value = fam.values[cert.chosen] if cert.chosen is not None else fam.default
    n = len(out.idx)
    members = [{"value": v, "label": fam.label(v), "risk": round(cert.risks[i], 6), "pvalue": round(cert.pvalues[i], 6),
                "token_ratio": round(cert.token_ratios[i], 6), "certified": i in cert.certified}
               for i, v in enumerate(fam.values)]
    least = round(smallest_certifiable(n, delta), 6) if n else None
    info: dict[str, Any] = {"risk": risk, "delta": delta, "reference": reference, "certified": cert.chosen is not None,
                            "fallback": cert.chosen is None, "value": value, "label": fam.label(value),
                            "problems": n, "units": len(out.units) // max(1, len(fam.values)),
                            "smallest_certifiable": least, "bound": "betting (aGRAPA), fixed-sequence LTT",
                            "members": members}
    if cert.chosen is not None:
        info |= {"empirical_risk": members[cert.chosen]["risk"], "token_ratio": members[cert.chosen]["token_ratio"]}
    else:
        info["note"] = (f"nothing certified at risk {risk:g} (delta {delta:g}) on {n} problems; {n} loss-free "
                        f"problems certify at best {least}: falling back to the shipped default")
    return {**fam.spec(value), "method": "labelfree", "labelfree": info}


def calibrate_labelfree(problems: Sequence[TraceProblem], program: str, *, risk: float, delta: float = 0.1,
                        reference: Reference = "final", orders: int = 20, seed: int = 0,
                        dataset: str | None = None) -> dict[str, Any]:
    """Certify the cheapest setting of ``program``'s family on ``problems`` (their gold and
    ``correct`` fields are removed before anything is replayed); the policy file as a dict. For
    ``sc`` and ``sc-cot`` the full vote already is the consensus: ``reference`` is ``final``."""
    check_not_reserved(problems, dataset)
    ref: Reference = reference if program == "cot" else "final"
    out = outcomes(problems, family(program), reference=ref, orders=orders, seed=seed)
    return summarize(out, certify(out, risk, delta, seed=seed), program, risk=risk, delta=delta, reference=ref)
