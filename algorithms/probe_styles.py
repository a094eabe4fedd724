r"""Probe styles: how a CoT chain is asked for its current answer (the text, the stops, the sampling).

A probe appends a suffix ending in ``\boxed{`` to the chain so far, decodes a short answer and
rolls back. Two named styles:

- ``forced`` — the probe the dev probe banks were made with (``shared/data/probes``): the
  suffix ``**Final Answer**\n\n\[ \boxed{`` right after the chain's text, **sampled at the
  chain's own temperature** (and top-p), at most 32 tokens, stopping at ``\]`` (or, where the
  backend can, right after the brace that closes the box: same answer, fewer tokens).
  ``cot_program()``'s default: what the shipped certaindex was chosen on.
- ``dynasor`` — Dynasor's probe (``... Oh, I suddenly got the answer to the whole problem,
  **Final Answer** \[ \boxed{``, or the model family's template), decoded greedily, at most
  20 tokens; the Dynasor presets use it.

Example:
    >>> s = PROBE_STYLES.get("forced")
    >>> s.suffix(), s.stop, s.max_tokens, s.sampling(0.6, 0.95, seed=3)
    ('**Final Answer**\n\n\\[ \\boxed{', ('\\]',), 32, {'temperature': 0.6, 'top_p': 0.95, 'seed': 3})
    >>> PROBE_STYLES.get("dynasor").sampling(0.6, 0.95, seed=3)
    {}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from certa.runtime.registry import Registry

from certa.algorithms.prompts import probe_text

__all__ = ["PROBE_STYLES", "ProbeStyle"]

FORCED_SUFFIX = "**Final Answer**\n\n\\[ \\boxed{"


@dataclass(frozen=True)
class ProbeStyle:
    """One way to probe: ``text`` (the suffix; None = the model family's :func:`probe_text`),
    ``stop`` strings, ``sample`` (``"chain"``: at the chain's temperature and top-p; ``"greedy"``)
    and the decode budget ``max_tokens``."""

    name: str
    text: str | None = None
    stop: tuple[str, ...] = ()
    sample: Literal["chain", "greedy"] = "greedy"
    max_tokens: int = 20

    def suffix(self, family: str = "default") -> str:
        """The text appended to the chain for a probe."""
        return self.text if self.text is not None else probe_text(family)

    def sampling(self, temperature: float, top_p: float = 1.0, *, seed: int | None = None) -> dict[str, Any]:
        """The probe's sampling arguments (``{}``: greedy, the backend's default for probes)."""
        if self.sample == "greedy" or temperature <= 0.0:
            return {}
        return {"temperature": temperature, "top_p": top_p, "seed": seed}


PROBE_STYLES: Registry[ProbeStyle] = Registry("probe style")
"""Every probe style by name (``cot_program(probe_style=...)``)."""
PROBE_STYLES.register("forced", ProbeStyle("forced", FORCED_SUFFIX, ("\\]",), "chain", 32),
                      help="the probe banks' probe: '**Final Answer** \\[ \\boxed{', sampled at the chain's temperature")
PROBE_STYLES.register("dynasor", ProbeStyle("dynasor", None, (), "greedy", 20),
                      help="Dynasor's probe text (or the model family's), decoded greedily")
