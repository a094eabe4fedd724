"""Certaindex signals for trace replay: SC answer entropy and CoT probe consistency.

The runtime layer may not import ``certa.algorithms`` (layering), so trace replay carries
these two small definitions itself; they follow DESIGN.md:

* :func:`entropy_certainty` — answers clustered by equality after :func:`normalize`,
  ``H = -Σ |C_i|/n log(|C_i|/n)``, certaindex ``(log n - H) / log n`` (0 for n < 2);
  unextracted answers (empty/None) each form their own cluster, so they never agree.
* :func:`probe_certainty` — over the last ``k`` probe answers: the fraction that equal the
  latest, are non-empty and free of hesitation words (whole words). 1.0 = Dynasor-CoT exit.

Traces store extracted answers, so equality after normalisation stands in for math
equivalence (pass ``same`` for a stricter or looser notion).

Example:
    >>> round(entropy_certainty(["4", "4", "4.0", "5"]), 3)
    0.594
    >>> probe_certainty(["", "12", "12", "12"], k=3)
    1.0
    >>> round(probe_certainty(["12", "wait 12", "12"], k=3), 3)
    0.667
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

HESITATION = ("wait", "hmm", "hold", "but", "okay", "no")
_HES = re.compile(r"\b(" + "|".join(HESITATION) + r")\b", re.IGNORECASE)


def normalize(answer: str | None) -> str | None:
    """Canonical form of an extracted answer (None when empty): trimmed, ``$``/spaces
    removed, ``\\boxed{}`` unwrapped, numbers canonicalised (``4.0`` → ``4``)."""
    if answer is None:
        return None
    s = answer.strip().strip("$").replace(" ", "").replace("\\!", "")
    m = re.fullmatch(r"\\boxed\{(.*)\}", s)
    if m:
        s = m.group(1)
    if not s:
        return None
    try:
        x = float(s.replace(",", ""))
    except ValueError:
        return s
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)


def clusters(answers: Sequence[str | None], same: Callable[[str, str], bool] | None = None) -> list[int]:
    """Cluster sizes (largest first). Empty answers are singletons."""
    keys: list[str] = []
    sizes: list[int] = []
    singles = 0
    for a in answers:
        n = normalize(a)
        if n is None:
            singles += 1
            continue
        for i, k in enumerate(keys):
            if (same(k, n) if same else k == n):
                sizes[i] += 1
                break
        else:
            keys.append(n)
            sizes.append(1)
    return sorted(sizes + [1] * singles, reverse=True)


def majority(answers: Sequence[str | None], same: Callable[[str, str], bool] | None = None) -> str | None:
    """The most common normalised answer (earliest on ties), or None."""
    counts: dict[str, int] = {}
    for a in answers:
        n = normalize(a)
        if n is not None:
            counts[n] = counts.get(n, 0) + 1
    return max(counts, key=lambda k: counts[k]) if counts else None


def entropy_certainty(answers: Sequence[str | None], same: Callable[[str, str], bool] | None = None) -> float:
    """Normalised semantic-entropy certainty in [0, 1] (1 = all answers agree)."""
    n = len(answers)
    if n < 2:
        return 0.0
    h = -sum(c / n * math.log(c / n) for c in clusters(answers, same))
    return max(0.0, min(1.0, (math.log(n) - h) / math.log(n)))


def hesitant(text: str | None) -> bool:
    """True if ``text`` contains a hesitation word (``wait``, ``hmm``, ... as whole words)."""
    return bool(text) and _HES.search(text) is not None  # type: ignore[arg-type]


def probe_certainty(answers: Sequence[str | None], k: int = 3) -> float:
    """Probe-in-the-middle consistency of the last ``k`` probe answers, in [0, 1]."""
    if k < 1 or len(answers) < k:
        return 0.0
    window = answers[-k:]
    latest = normalize(window[-1])
    if latest is None or hesitant(window[-1]):
        return 0.0
    agree = sum(1 for a in window if not hesitant(a) and normalize(a) == latest)
    return agree / k


__all__ = ["HESITATION", "clusters", "entropy_certainty", "hesitant", "majority", "normalize", "probe_certainty"]
