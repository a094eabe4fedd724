"""The Program abstraction from the Certaindex paper: certaindex, knob, state; execute, update.

A Program is what the runtime runs. Compiled graphs produce Programs; you can also write
one by hand:

Example:
    >>> from certa.runtime import Program, Knob
    >>> class Count(Program):
    ...     knob = Knob("iterations", cap=3)
    ...     def __init__(self, start: int = 0):
    ...         super().__init__(); self.state = {"n": start}
    ...     async def execute(self, ctx):
    ...         self.state["n"] += 1; self.knob_used += 1
    ...         return True
    ...     def update_certaindex(self):
    ...         return min(1.0, self.state["n"] / 10)
    ...     def answer(self):
    ...         return self.state["n"]
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from certa.runtime.errors import ConfigError
from certa.runtime.types import CertaindexPoint, Knob, TokenUsage

if TYPE_CHECKING:  # pragma: no cover
    from certa.runtime.context import Context
    from certa.runtime.draw import Mermaid
    from certa.runtime.policy import Policy
    from certa.runtime.result import Result


class Program(abc.ABC):
    """Base class of everything the runtime runs.

    Subclasses implement :meth:`execute` (run one step; return False when nothing is left)
    and usually :meth:`update_certaindex` and :meth:`answer`. The runtime owns
    ``program_id``, ``tokens`` and ``trajectory``; the program owns ``state`` and
    ``knob_used`` (units of its knob spent so far).
    """

    name: str = ""
    knob: Knob = Knob("iterations", cap=None)
    policy: "Policy | None" = None
    on_result: "Callable[[Result], None] | None" = None
    """Called by the Runtime with this program's :class:`~certa.runtime.result.Result` when it ends
    (not when cancelled); set on an instance, e.g. by ``certa.SelfCalibrating`` to learn from it."""

    def __init__(self) -> None:
        self.program_id: str = ""
        self.state: Any = None
        self.knob_used: int = 0
        self.tokens = TokenUsage()
        self.trajectory: list[CertaindexPoint] = []
        self.signals: dict[str, float] = {}
        self.policy_marks: dict[str, Any] = {}  # per-run scratch space for policies
        self.hit_cap = False  # set by a program whose own cap rule stopped it (see cap_reached)

    @property
    def display_name(self) -> str:
        return self.name or type(self).__name__

    @property
    def certaindex(self) -> float | None:
        """The latest combined certaindex (AND of all signals = their minimum), or None."""
        return self.trajectory[-1].value if self.trajectory else None

    @property
    def knob_cap(self) -> int | None:
        return self.knob.cap

    @property
    def knob_value(self) -> int:
        """Knob units spent: ``knob_used``, or main decode tokens for a ``tokens`` knob."""
        return self.tokens.main if self.knob.unit == "tokens" else self.knob_used

    def cap_reached(self) -> bool:
        """Whether the knob cap is spent, asked before every step: the one owner of the cap rule.

        Default: ``knob_value >= knob_cap``. A program that enforces its cap as it launches work
        (compiled graphs: no branch starts past the cap, in-flight ones finish) overrides this
        to return False and sets ``hit_cap`` when the cap stopped it.
        """
        cap = self.knob_cap
        return cap is not None and self.knob_value >= cap

    @abc.abstractmethod
    async def execute(self, ctx: "Context") -> bool:
        """Run one step. Return False when the program has finished on its own."""

    def update_certaindex(self) -> float | dict[str, float] | None:
        """Recompute the certainty signal(s) from ``state``; a float, a {name: float} dict or None."""
        return None

    def answer(self) -> Any:
        """The program's final answer from its current state."""
        return getattr(self.state, "answer", None) if not isinstance(self.state, dict) else self.state.get("answer")

    async def aclose(self) -> None:
        """Stop all work still in flight (the runtime calls this on exit)."""

    def draw(self) -> "Mermaid":
        """A Mermaid diagram of the program (hand-written programs draw as a single node)."""
        from certa.runtime.draw import Mermaid
        return Mermaid(f"flowchart TD\n    __start__([start]) --> execute[{self.display_name}.execute]\n"
                       f"    execute -->|certaindex + policy| execute\n    execute --> __end__([end])\n")


def instantiate(program: Any, inputs: dict[str, Any]) -> Program:
    """A Program to run: ``program`` itself (an instance, no inputs), ``program(**inputs)`` (a
    Program class) or ``program.new(**inputs)`` (a compiled graph); ConfigError otherwise."""
    if isinstance(program, Program):
        if inputs:
            raise ConfigError(f"inputs {sorted(inputs)} given with an already-built program instance",
                              hint="pass the class or compiled graph instead")
        return program
    if isinstance(program, type) and issubclass(program, Program):
        try:
            return program(**inputs)
        except TypeError as exc:  # a missing or unknown input: coded, like a graph's CT300
            raise ConfigError(f"bad inputs for program {program.__name__!r}: {exc}",
                              program=program.__name__) from exc
    new = getattr(program, "new", None)
    if callable(new):
        return new(**inputs)
    raise ConfigError(f"cannot run {program!r}: expected a Program, a Program class or a compiled graph")
