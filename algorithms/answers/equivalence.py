r"""Math answer equivalence: fast exact/numeric paths, then math-verify under a real timeout.

``math_equal(a, b)`` first compares normalized strings, then numbers (integers, decimals,
``a/b``, ``\frac{a}{b}``, percents; relative tolerance 1e-6). Only when neither decides does
it ask math-verify (``verify(parse(a), parse(b))``), in a small pool of worker processes
(:mod:`certa.algorithms.answers.verify_pool`) so the timeout works in any thread of any process; a
timeout counts as "not equal". Results are cached in a bounded LRU keyed on the normalized
pair. math-verify is an optional extra (``pip install certa[math]``): without it only the
fast paths run. The pool starts on first use; :func:`shutdown` stops it (also at exit).

Example:
    >>> math_equal(r"\frac{1}{2}", "0.5"), math_equal("10\\%", "0.1"), math_equal("17", "18")
    (True, True, False)
    >>> grade("... so she makes \\boxed{18} dollars.", "18", "gsm8k")
    True
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from fractions import Fraction

from certa.algorithms.answers import verify_pool
from certa.algorithms.answers.extract import NUMERIC_DATASETS, canonical_dataset, extract_answer, normalize

__all__ = ["math_equal", "grade", "parse_number", "warm_up", "shutdown", "cache_clear", "MAX_ANSWER_CHARS"]

MAX_ANSWER_CHARS = 1_000
"""Answers longer than this are compared as normalized strings only."""
REL_TOL = Fraction(1, 10**6)
_CACHE_SIZE = 8_192
_cache: OrderedDict[tuple[str, str], bool] = OrderedDict()
_cache_lock = threading.Lock()

_INT_OR_DEC = r"\d{1,60}(?:\.\d{0,60})?|\.\d{1,60}"
_PLAIN = re.compile(rf"(?P<sign>-?)(?P<num>{_INT_OR_DEC})")
_SLASH = re.compile(rf"(?P<sign>-?)\(?(?P<num>-?{_INT_OR_DEC})\)?/\(?(?P<den>-?{_INT_OR_DEC})\)?")
_FRAC = re.compile(rf"(?P<sign>-?)\\frac(?:\{{(?P<num>-?{_INT_OR_DEC})\}}|(?P<n1>\d))"
                   rf"(?:\{{(?P<den>-?{_INT_OR_DEC})\}}|(?P<d1>\d))")
_PCT = re.compile(r"\\?%$")


def parse_number(answer: object) -> tuple[Fraction, bool] | None:
    r"""``(value, had_percent)`` for a plain number, ``a/b`` or ``\frac{a}{b}``; else ``None``.

    >>> parse_number(r"-\frac{3}{4}"), parse_number("12.5\\%"), parse_number("x")
    ((Fraction(-3, 4), False), (Fraction(25, 2), True), None)
    """
    if answer is None:
        return None
    s = str(answer).strip()
    if len(s) > 200:
        return None
    s = s.replace("$", "").replace("\\!", "").replace("\\left", "").replace("\\right", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace(" ", "")
    pct = bool(_PCT.search(s))
    s = _PCT.sub("", s).rstrip(".")
    s = re.sub(r"\^\{?\\circ\}?$", "", s)
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d*)?", s):
        s = s.replace(",", "")
    if s.startswith("+"):
        s = s[1:]
    try:
        m = _PLAIN.fullmatch(s)
        if m:
            v = Fraction(m["num"])
            return (-v if m["sign"] else v), pct
        m = _FRAC.fullmatch(s) or _SLASH.fullmatch(s)
        if m:
            num = Fraction(m["num"] if m["num"] is not None else m["n1"])
            den = Fraction(m["den"] if m["den"] is not None else m["d1"])
            if den == 0:
                return None
            v = num / den
            return (-v if m["sign"] else v), pct
    except (ValueError, ZeroDivisionError, ArithmeticError):
        return None
    return None


def _close(x: Fraction, y: Fraction) -> bool:
    return x == y or abs(x - y) <= REL_TOL * max(abs(x), abs(y))


def _numbers_equal(a: tuple[Fraction, bool], b: tuple[Fraction, bool]) -> bool:
    xs = {a[0]} | ({a[0] / 100} if a[1] else set())
    ys = {b[0]} | ({b[0] / 100} if b[1] else set())
    return any(_close(x, y) for x in xs for y in ys)


def _cache_get(key: tuple[str, str]) -> bool | None:
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
        return hit


def _cache_put(key: tuple[str, str], value: bool) -> None:
    with _cache_lock:
        _cache[key] = value
        _cache.move_to_end(key)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)


def cache_clear() -> None:
    """Forget every cached math-verify result."""
    with _cache_lock:
        _cache.clear()


def _strip_delims(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s.strip("$").strip()
    return s


def math_equal(a: object, b: object, *, timeout: float = 2.0) -> bool:
    r"""Whether two answers are mathematically equal (``a`` plays the gold's role).

    Empty or ``None`` answers are never equal to anything, not even to each other. Never
    raises; safe to call from any thread. ``timeout`` bounds the math-verify call (seconds);
    a timeout, a crash or a missing math-verify install mean ``False``.

    >>> math_equal("1,000", "1000"), math_equal(r"\dfrac{14}{3}", "14/3"), math_equal("", "")
    (True, True, False)
    """
    if a is None or b is None:
        return False
    sa, sb = _strip_delims(str(a)), _strip_delims(str(b))
    na, nb = normalize(sa), normalize(sb)
    if not na or not nb:
        return False
    if na == nb:
        return True
    va, vb = parse_number(sa) or parse_number(na), parse_number(sb) or parse_number(nb)
    if va is not None and vb is not None:
        return _numbers_equal(va, vb)
    if len(sa) > MAX_ANSWER_CHARS or len(sb) > MAX_ANSWER_CHARS:
        return False
    key = (na, nb)
    hit = _cache_get(key)
    if hit is not None:
        return hit
    result = verify_pool.verify("\\boxed{" + sa + "}", "\\boxed{" + sb + "}", timeout=timeout)
    if result is None:  # math-verify unavailable: do not cache, it may be installed later
        return False
    _cache_put(key, result)
    return result


def grade(prediction: object, gold: object, dataset: str = "math", *, timeout: float = 2.0) -> bool:
    r"""Whether a prediction (full model output or a bare answer) matches the gold answer.

    The answer is taken with :func:`~certa.algorithms.answers.extract_answer`; a short
    prediction with nothing to extract is used as the answer itself. Numeric datasets
    (gsm8k, aime, amc, asdiv) compare numbers; text golds (ASDiv ``"Mrs. Hilt"``) compare
    normalized strings case-insensitively; MATH uses :func:`math_equal`.

    >>> grade("The answer is 25", "025", "aime24"), grade(r"\boxed{0.5}", r"\frac12", "math500")
    (True, True)
    """
    try:
        family = canonical_dataset(dataset)
        text = "" if prediction is None else str(prediction)
        g = normalize(gold, family)
        if not g:
            return False
        short = len(text) <= 200 and "\n" not in text
        if short and normalize(text, family).lower() == g.lower():
            return True  # a bare answer such as "5:45" that extraction would cut
        answer = extract_answer(text, family)
        if answer is None and short:
            answer = text
        p = normalize(answer, family)
        if not p:
            return False
        if g == p or g.lower() == p.lower():
            return True
        if family in NUMERIC_DATASETS:
            vg, vp = parse_number(g), parse_number(p)
            if vg is not None and vp is not None:
                return _numbers_equal(vg, vp)
        gold_text = str(gold) if family == "math" else g
        return math_equal(gold_text, answer, timeout=timeout)
    except Exception:  # pragma: no cover - grading never raises
        return False


def warm_up() -> bool:
    """Start a math-verify worker now, off the critical path; ``False`` if math-verify is missing."""
    return verify_pool.warm_up()


def shutdown() -> None:
    """Stop the math-verify worker processes (a later call starts them again)."""
    verify_pool.shutdown()
