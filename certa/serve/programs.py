r"""The programs a server serves, and how one request's overrides turn into a runnable program.

A :class:`ServedProgram` wraps a compiled graph or a Program class under a model name (the
``model`` field of OpenAI requests). :meth:`ServedProgram.instantiate` builds a fresh
program for one question with the request's overrides applied to that instance only:

* ``preset`` rebuilds a built-in program with ``build(name, preset=...)`` (cached);
* ``policy`` recompiles a graph with ``with_policy`` (validated, cached by its JSON) or sets it
  on a Program instance;
* ``knob_cap`` replaces the instance's knob with a copy that has the new cap;
* ``max_tokens`` wraps the policy in :class:`~certa.runtime.policy.TokenBudget` (stop, reason
  ``length``, once the program's decode tokens reach the budget: the ``Length`` baseline's rule;
  checked between steps like every policy).

Example:
    >>> sp = ServedProgram.resolve("sc")
    >>> prog = sp.instantiate("What is 9 * 2?", knob_cap=8, policy={"kind": "esc", "window": 4}, max_tokens=4000)
    >>> sp.name, prog.knob.cap, type(prog.policy).__name__, type(prog.policy.inner).__name__
    ('sc', 8, 'TokenBudget', 'ESC')
"""

from __future__ import annotations

import inspect
import json
from collections import OrderedDict
from typing import Any

from certa.runtime.errors import ConfigError
from certa.runtime.policy import Policy, TokenBudget
from certa.runtime.program import Program
from certa.runtime.types import Knob

__all__ = ["ServedProgram", "TokenBudget", "served_programs"]

_CACHE_SIZE = 64


class ServedProgram:
    """One servable program: a compiled graph (``.new``) or a Program class, under ``name``.

    ``library``: the built-in program name when it came from :mod:`certa.algorithms.programs.library`
    (presets need one).
    """

    def __init__(self, name: str, target: Any, library: str | None = None) -> None:
        if isinstance(target, Program):
            raise ConfigError(f"program {name!r} is a Program instance; a server needs a fresh one per request",
                              hint="pass the Program class or a compiled graph")
        if not (callable(getattr(target, "new", None)) or (isinstance(target, type) and issubclass(target, Program))):
            raise ConfigError(f"cannot serve {target!r} as {name!r}", hint="pass a compiled graph or a Program class")
        self.name, self.target, self.library = name, target, library
        self._variants: OrderedDict[tuple[str | None, str | None], Any] = OrderedDict()

    @classmethod
    def resolve(cls, spec: Any, name: str | None = None) -> ServedProgram:
        """From a built-in name, ``FILE.py:attr``, a compiled graph, a Program class or a ServedProgram.

        Without ``name`` the model name is the built-in name, else the program's own name
        (a graph's ``name=``, a Program class's ``name`` or class name); a file's attribute or
        stem is used only for a program without one.
        """
        if isinstance(spec, ServedProgram):
            return spec if name is None or name == spec.name else cls(name, spec.target, spec.library)
        if isinstance(spec, str):
            from certa.loading import load_target
            target = load_target(spec)
            library = spec if ":" not in spec and not spec.endswith(".py") else None
            default = spec if library else (getattr(target, "name", None) or spec.partition(":")[2] or "program")
            return cls(name or default, target, library)
        default = getattr(spec, "name", None) or getattr(spec, "__name__", None) or type(spec).__name__
        return cls(name or default, spec)

    @property
    def default_knob(self) -> Knob:
        """The knob (unit and cap) the program has without overrides."""
        return self.target.knob

    # ---- per-request variants -------------------------------------------------------
    def _variant(self, preset: str | None, policy: dict[str, Any] | None) -> tuple[Any, Policy | None]:
        """The runnable for (preset, policy) and the policy to set on a Program instance (if any)."""
        key = (preset, json.dumps(policy, sort_keys=True, default=str) if policy is not None else None)
        pol = _policy_from_dict(policy) if policy is not None else None
        if key in self._variants:
            self._variants.move_to_end(key)
            return self._variants[key], pol
        target = self.target
        if preset is not None:
            if self.library is None:
                raise ConfigError(f"program {self.name!r} has no presets", hint="presets apply to the built-in cot")
            from certa.algorithms.programs.library import build
            target = build(self.library, preset=preset)
        if pol is not None and callable(getattr(target, "with_policy", None)):
            target = target.with_policy(pol)  # re-validated: a policy needing a missing certaindex fails here
        self._variants[key] = target
        if len(self._variants) > _CACHE_SIZE:
            self._variants.popitem(last=False)
        return target, pol

    def instantiate(self, question: str, *, preset: str | None = None, policy: dict[str, Any] | None = None,
                    knob_cap: int | None = None, max_tokens: int | None = None, seed: int | None = None) -> Program:
        """A fresh program for ``question`` with the overrides applied (raises ConfigError)."""
        target, pol = self._variant(preset, policy)
        inputs: dict[str, Any] = {"question": question}
        if seed is not None and _takes(target, "seed"):
            inputs["seed"] = seed
        prog = target.new(**inputs) if callable(getattr(target, "new", None)) else target(**inputs)
        if pol is not None and not callable(getattr(target, "with_policy", None)):
            prog.policy = pol
        if knob_cap is not None:
            k = prog.knob
            prog.knob = Knob(k.unit, cap=knob_cap, step=k.step)
        if max_tokens is not None:
            prog.policy = TokenBudget(prog.policy, max_tokens)
        return prog


def served_programs(specs: list[Any]) -> dict[str, ServedProgram]:
    """Resolve ``specs`` (as ``certa serve --program`` gives them) to ``{model name: program}``.

    Each is named by :meth:`ServedProgram.resolve` (a file's program by its graph name); two
    programs under one name are a ``ConfigError``, not a silent overwrite.

    >>> list(served_programs(["sc", "cot"]))
    ['sc', 'cot']
    """
    out: dict[str, ServedProgram] = {}
    given: dict[str, Any] = {}
    for spec in specs:
        sp = ServedProgram.resolve(spec)
        if sp.name in out:
            raise ConfigError(f"two programs are served as {sp.name!r}: {given[sp.name]!r} and {spec!r}",
                              hint="give the graphs different name=, or serve one of them")
        out[sp.name], given[sp.name] = sp, spec if isinstance(spec, str) else sp.name
    return out


def _policy_from_dict(spec: dict[str, Any]) -> Policy:
    from certa.algorithms.policies import policy_from_dict
    try:
        return policy_from_dict(spec)
    except (TypeError, ValueError) as exc:  # ConfigError is a CertaError, not a ValueError: passes through
        raise ConfigError(f"bad policy {spec.get('kind')!r}: {exc}") from None


def _takes(target: Any, field: str) -> bool:
    state = getattr(getattr(target, "graph", None), "state", None)
    if state is not None:
        return field in getattr(state, "model_fields", {})
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False
    return field in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
