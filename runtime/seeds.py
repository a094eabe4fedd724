"""Seeds of sub-programs: ``seed=ctx.branch`` differs in every ``ctx.call``, run after run the same.

Branch numbers restart at 0 in every program, so a sub-program whose steps sample with
``seed=ctx.branch`` (or any seed derived from its own state) would send the same seeds — and
get the same text — in every call of it. Each sub-program run therefore gets a *salt* from its
call path: the caller's salt, the calling step and branch, which call of that branch it is,
and the sub-program's name. Every seed a sub-program's request carries is mixed with its salt
(:func:`salted`): unique per (program, step, branch, call path), and deterministic — the same
program tree sends the same seeds in every run and process (no Python ``hash``). A root
program has no salt: its seeds go out as given.

Example:
    >>> a = call_salt(None, "sample", 0, 0, "mcts")
    >>> b = call_salt(None, "sample", 1, 0, "mcts")
    >>> a != b and salted(0, a) != salted(0, b), salted(7, a) == salted(7, call_salt(None, "sample", 0, 0, "mcts"))
    (True, True)
"""

from __future__ import annotations

import hashlib

__all__ = ["call_salt", "salted"]

_MASK = (1 << 31) - 1  # seeds stay non-negative 31-bit ints: every backend takes them
_ODD = 0x9E3779B1  # odd: seed -> seed * _ODD is a bijection mod 2**31, so one salt never maps two seeds to one


def call_salt(parent: int | None, step: str, branch: int, index: int, name: str) -> int:
    """The salt of the ``index``-th sub-program ``name`` called by branch ``branch`` of ``step``
    in a program whose own salt is ``parent`` (``None``: a root program)."""
    key = f"{parent}|{step}|{branch}|{index}|{name}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") & _MASK


def salted(seed: int, salt: int) -> int:
    """``seed`` as a sub-program with ``salt`` sends it: distinct seeds stay distinct."""
    return (int(seed) * _ODD + salt) & _MASK
