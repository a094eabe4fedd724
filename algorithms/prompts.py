r"""Prompt templates, rendered in a sandboxed Jinja2 environment.

Templates live in ``algorithms/templates/*.j2`` (installed as package data). They are
rendered by an :class:`~jinja2.sandbox.ImmutableSandboxedEnvironment` (a
``SandboxedEnvironment`` that also forbids mutating lists and dicts) with autoescape off
and ``StrictUndefined``, so a missing variable is an error and template code cannot reach
Python internals. Every template error becomes a :class:`~certa.runtime.errors.ConfigError`.

Templates: ``math_cot`` (question), ``probe_default`` / ``probe_qwen`` (see
:func:`probe_text`), ``final_answer`` (answer), ``self_eval`` (question, step, steps=[]),
``mcts_step`` (question, steps=[]).

Example:
    >>> render("math_cot", question="What is 17 * 24?").splitlines()[0]
    'What is 17 * 24?'
    >>> render("Hi {{ name }}!", name="Ada")
    'Hi Ada!'
    >>> final_answer("18")
    '\n\n**Final Answer**\n\\[ \\boxed{18} \\]'
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from certa.runtime.errors import ConfigError

__all__ = ["TEMPLATE_DIR", "render", "prompt", "probe_text", "final_answer", "template_names",
           "PROBE_FAMILIES"]

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
PROBE_FAMILIES = {
    "default": "probe_default", "dynasor": "probe_default", "r1": "probe_default",
    "deepseek": "probe_default", "qwen": "probe_qwen", "chatml": "probe_qwen",
}
"""Model family -> probe template. ``default`` is Dynasor's probe, appended inside the
reasoning; ``qwen``/``chatml`` suits non-thinking Qwen2.5(-Math)-Instruct models, which end
with "the final answer is $\\boxed{..}$"."""

_NAME = re.compile(r"[A-Za-z0-9_\-]{1,64}(?:\.j2)?")


MAX_POWER = 4096
"""The largest integer exponent a template may use (``2 ** 4096`` is fine, ``10 ** 10 ** 10`` is not)."""
MAX_REPEAT = 1 << 20
"""The longest string or list a template may build by repetition (``'ab' * 3``)."""


class _Sandbox(ImmutableSandboxedEnvironment):
    """The sandbox, with ``**`` and ``*`` bounded so template code cannot exhaust CPU or memory
    (Jinja2 already caps ``range`` at ``MAX_RANGE`` items)."""

    intercepted_binops = frozenset({"**", "*"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, int) and isinstance(left, int) and abs(left) > 1 \
                and right > MAX_POWER:
            raise jinja2.exceptions.SecurityError(f"power with exponent {right} (over {MAX_POWER})")
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple, bytes)) and isinstance(n, int) and len(seq) * n > MAX_REPEAT:
                    raise jinja2.exceptions.SecurityError(f"repetition to {len(seq) * n} items (over {MAX_REPEAT})")
        return super().call_binop(context, operator, left, right)


@lru_cache(maxsize=1)
def _env() -> ImmutableSandboxedEnvironment:
    return _Sandbox(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        auto_reload=False,
    )


def template_names() -> list[str]:
    """Names of the bundled templates.

    >>> "math_cot" in template_names()
    True
    """
    return sorted(p.stem for p in TEMPLATE_DIR.glob("*.j2"))


@lru_cache(maxsize=128)
def _from_source(source: str) -> jinja2.Template:
    return _env().from_string(source)


def _template(name_or_source: str) -> jinja2.Template:
    if _NAME.fullmatch(name_or_source):
        name = name_or_source.removesuffix(".j2")
        if (TEMPLATE_DIR / f"{name}.j2").is_file():
            return _env().get_template(f"{name}.j2")
        raise ConfigError(f"unknown prompt template {name_or_source!r}",
                          hint=f"one of {', '.join(template_names())}, or Jinja2 source text")
    return _from_source(name_or_source)


def render(name_or_source: str, /, **variables: Any) -> str:
    """Render a bundled template by name, or Jinja2 source text, with ``variables``.

    A bare identifier (optionally ending ``.j2``) names a bundled template; anything else is
    template source. Raises ``ConfigError`` for unknown templates, missing variables, syntax
    errors and sandbox violations.

    >>> render("self_eval", question="1+1?", step="1+1=2").endswith("Answer Yes or No.")
    True
    """
    if not isinstance(name_or_source, str):
        raise ConfigError(f"template must be a string, got {type(name_or_source).__name__}")
    try:
        return _template(name_or_source).render(**variables)
    except jinja2.exceptions.SecurityError as exc:
        raise ConfigError(f"template tried an unsafe operation: {exc}",
                          hint="templates may only format the variables they are given") from exc
    except jinja2.exceptions.UndefinedError as exc:
        raise ConfigError(f"template variable missing: {exc}",
                          hint="pass every variable the template uses") from exc
    except jinja2.exceptions.TemplateError as exc:
        raise ConfigError(f"template error: {exc}") from exc
    except (ArithmeticError, RecursionError, MemoryError, TypeError, ValueError, LookupError) as exc:
        # template code that fails (range over MAX_RANGE is an OverflowError, 1 // 0, 'a' + 1)
        raise ConfigError(f"template expression failed: {type(exc).__name__}: {exc}",
                          hint="templates may only format the variables they are given") from exc


prompt = render
"""Alias of :func:`render` (``ct.prompt("math_cot", question=...)``)."""


def probe_text(family: str = "default") -> str:
    r"""The probe appended mid-reasoning to elicit the current answer; ends with ``\boxed{``.

    >>> probe_text().endswith("**Final Answer**\n\n\\[ \\boxed{")
    True
    """
    key = str(family).lower()
    if key not in PROBE_FAMILIES:
        raise ConfigError(f"unknown probe family {family!r}",
                          hint=f"one of {', '.join(sorted(PROBE_FAMILIES))}")
    return render(PROBE_FAMILIES[key])


def final_answer(answer: str) -> str:
    r"""Text emitted in place of the rest of the reasoning when a CoT exits early.

    >>> final_answer(r"\frac{1}{2}").endswith("\\boxed{\\frac{1}{2}} \\]")
    True
    """
    return render("final_answer", answer=answer)
