"""Graders and extractors never hang: adversarial LaTeX (nested braces, huge exponents, \\frac and
power towers) from recursive hypothesis generators, with a wall-clock bound on every single call.

Basic properties and a fixed list of huge inputs live in test_answers.py / test_equivalence.py;
this file adds structured adversarial generators and per-call timing bounds, including
``math_equal(a, b, timeout=...)`` on the math-verify path.
"""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

answers = pytest.importorskip("certa.algorithms.answers")
equivalence = pytest.importorskip("certa.algorithms.answers.equivalence")
from certa.algorithms.answers import verify_pool  # noqa: E402

EXTRACT_BOUND = 1.0  # seconds for one extractor call on <= ~100 KB of text (2 shared cores)
MAX_CHARS = 60_000  # generated text is cut here (extractors scan only the last MAX_SCAN chars anyway)
TIMEOUT = 0.3  # math_equal's timeout in these tests
RESPAWN = 3.0  # a call right after a timeout may also wait for a fresh math-verify worker to start
needs_mv = pytest.mark.skipif(not verify_pool.available(), reason="math-verify is not installed")
STATS = {"extract_cases": 0, "extract_max_s": 0.0, "equal_cases": 0, "equal_timeouts": 0, "equal_max_s": 0.0}


# ---- generators ----------------------------------------------------------------------------
_ATOMS = st.one_of(
    st.integers(-10**6, 10**6).map(str),
    st.sampled_from(["x", "y", "\\pi", "e", "\\infty", "0.5", "1,000", "3\\%", "90^\\circ", "\\emptyset", "i"]),
    st.text(alphabet="0123456789", min_size=30, max_size=300),  # long numbers
    st.sampled_from(["{", "}", "\\{", "\\}", "\\boxed{", "$", "\\left(", "\\right)", "^", "_", "\\\\"]),  # debris
)


def _compose(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    pair = st.tuples(inner, inner)
    return st.one_of(
        pair.map(lambda t: f"\\frac{{{t[0]}}}{{{t[1]}}}"),
        pair.map(lambda t: f"\\dfrac{t[0]}{t[1]}"),
        pair.map(lambda t: f"{{{t[0]}}}^{{{t[1]}}}"),
        pair.map(lambda t: f"\\binom{{{t[0]}}}{{{t[1]}}}"),
        inner.map(lambda c: f"\\sqrt{{{c}}}"),
        inner.map(lambda c: f"\\sqrt[{c}]{{{c}}}"),
        inner.map(lambda c: f"\\left({c}\\right)"),
        inner.map(lambda c: "{" + c + "}"),
        inner.map(lambda c: f"\\boxed{{{c}}}"),
        inner.map(lambda c: f"\\text{{{c}}}"),
        inner.map(lambda c: f"({c})!"),
        st.tuples(inner, inner, st.sampled_from(["+", "-", "\\cdot", "\\times", ",", "=", "\\le", "/"])).map(
            lambda t: f"{t[0]}{t[2]}{t[1]}"),
    )


LATEX = st.recursive(_ATOMS, _compose, max_leaves=30)
TOWERS = st.one_of(
    st.integers(1, 4000).map(lambda d: "{" * d + "1" + "}" * d),  # deep balanced braces
    st.integers(1, 4000).map(lambda d: "{" * d + "1"),  # unbalanced
    st.integers(1, 4000).map(lambda d: "1" + "}" * d),
    st.integers(1, 300).map(lambda d: "\\frac{1}{" * d + "2" + "}" * d),  # \frac towers
    st.integers(1, 300).map(lambda d: "\\frac{" * d + "1}{2}" * d),
    st.integers(2, 12).map(lambda d: "^{".join(["9"] * d) + "}" * (d - 1)),  # power towers 9^{9^{...}}
    st.integers(2, 8).map(lambda d: "{" * d + "2" + "}^{2" * (d - 1) + "}" * (d - 1)),
    st.integers(10, 5000).map(lambda n: f"10^{{{'9' * n}}}"),  # huge exponents
    st.integers(10, 10**7).map(lambda n: f"{n}!"),  # huge factorials
    st.integers(1, 500).map(lambda d: "\\sqrt{" * d + "2" + "}" * d),
    st.integers(1, 2000).map(lambda d: "\\left(" * d + "x" + "\\right)" * d),
    st.integers(1, 2000).map(lambda d: "\\boxed{" * d + "7" + "}" * d),
    st.integers(1, 3000).map(lambda d: "\\text{" * d + "a"),
)
ADVERSARIAL = st.one_of(LATEX, TOWERS, st.tuples(LATEX, TOWERS, LATEX).map("".join)).map(lambda s: s[:MAX_CHARS])
WRAPS = st.sampled_from(["@", "\\boxed{@}", "So the answer is $@$.", "#### @", "Final Answer: @",
                         "**Final Answer**\n\\[ \\boxed{@} \\]", "wait, hmm @ } \\boxed{", "@ @ @"])
DATASETS = st.sampled_from(["math", "gsm8k", "aime24", "amc23", "asdiv", "math500"])


def _timed(fn, *args, **kw):
    t = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t


# ---- extractors and normalizers ---------------------------------------------------------
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(core=ADVERSARIAL, wrap=WRAPS, dataset=DATASETS)
def test_every_extractor_call_returns_fast(core, wrap, dataset):
    text = wrap.replace("@", core)
    calls = [(answers.extract_boxed, (text,)), (answers.extract_probe_answer, (text,)),
             (answers.extract_answer, (text, dataset)), (answers.normalize, (text, dataset)),
             (answers.normalize, (core, dataset)), (answers.gsm8k_gold, (text,)),
             (equivalence.parse_number, (core,))]
    for fn, args in calls:
        out, dt = _timed(fn, *args)
        STATS["extract_max_s"] = max(STATS["extract_max_s"], dt)
        assert dt < EXTRACT_BOUND, f"{fn.__name__} took {dt:.2f}s on {len(text)} chars"
        assert out is None or isinstance(out, (str, tuple))
    STATS["extract_cases"] += 1


@pytest.mark.parametrize("repeat", [1, 10, 25])
def test_scaled_towers_stay_within_the_bound(repeat):
    """Whole towers repeated until the text is far past MAX_SCAN: the scan cap must hold."""
    for tower in ("\\frac{1}{" * 300 + "2" + "}" * 300, "^{".join(["9"] * 12) + "}" * 11, "{" * 4000,
                  "\\boxed{" * 2000 + "7" + "}" * 2000, "\\text{" * 3000):
        text = tower * repeat
        for fn, args in [(answers.extract_answer, (text, "math")), (answers.normalize, (text,)),
                         (answers.extract_boxed, (text,)), (answers.extract_probe_answer, (text,))]:
            _, dt = _timed(fn, *args)
            assert dt < EXTRACT_BOUND, f"{fn.__name__} took {dt:.2f}s on {len(text)} chars"


# ---- math_equal: every call returns within its timeout (+ a worker respawn) -------------
@pytest.fixture(scope="module")
def warm_pool():
    if verify_pool.available():
        assert verify_pool.warm_up()
    yield
    print(f"\nfuzz: {STATS['extract_cases']} extractor cases (max call {STATS['extract_max_s'] * 1e3:.0f} ms); "
          f"{STATS['equal_cases']} math_equal cases, {STATS['equal_timeouts']} hit the {TIMEOUT}s timeout, "
          f"slowest call {STATS['equal_max_s']:.2f}s")


def _check_equal(a, b, timeout=TIMEOUT):
    out, dt = _timed(equivalence.math_equal, a, b, timeout=timeout)
    assert isinstance(out, bool)
    STATS["equal_cases"] += 1
    STATS["equal_timeouts"] += dt >= timeout
    STATS["equal_max_s"] = max(STATS["equal_max_s"], dt)
    assert dt < timeout + RESPAWN, f"math_equal took {dt:.2f}s with timeout={timeout}"
    return out


HARD_PAIRS = [
    ("9^{9^{9^{9}}}", "9^{9^{9^{8}}}"),
    ("2^{2^{2^{2^{2^{2^{2}}}}}}", "2^{2^{2^{2^{2^{2^{3}}}}}}"),
    ("\\binom{10^{12}}{10^{6}}", "\\binom{10^{12}}{10^{6}+1}"),
    ("(x+1)^{100000}", "(x+1)^{99999}(x+1)"),
    ("\\frac{1}{" * 150 + "2" + "}" * 150, "2"),
    ("\\sqrt{" * 300 + "2" + "}" * 300, "2^{2^{-300}}"),
]


@needs_mv
@pytest.mark.parametrize("a, b", HARD_PAIRS, ids=range(len(HARD_PAIRS)))
def test_math_equal_on_known_hard_pairs_is_bounded(a, b, warm_pool):
    _check_equal(a, b)


@needs_mv
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(a=ADVERSARIAL, b=ADVERSARIAL)
def test_math_equal_on_adversarial_pairs_is_bounded(a, b, warm_pool):
    _check_equal(a, b)


@needs_mv
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(pred=ADVERSARIAL, gold=ADVERSARIAL, wrap=WRAPS, dataset=DATASETS)
def test_grade_on_adversarial_outputs_is_bounded(pred, gold, wrap, dataset, warm_pool):
    text = wrap.replace("@", pred)
    out, dt = _timed(equivalence.grade, text, gold, dataset, timeout=TIMEOUT)
    assert isinstance(out, bool)
    STATS["equal_cases"] += 1
    STATS["equal_max_s"] = max(STATS["equal_max_s"], dt)
    assert dt < TIMEOUT + RESPAWN


def test_math_equal_fast_paths_need_no_worker(monkeypatch):
    """Without math-verify, every call is pure Python and fast, whatever the input."""
    monkeypatch.setattr(verify_pool, "available", lambda: False)
    equivalence.cache_clear()
    for a, b in HARD_PAIRS:
        out, dt = _timed(equivalence.math_equal, a, b, timeout=TIMEOUT)
        assert out in (True, False) and dt < EXTRACT_BOUND


@needs_mv
def test_concurrent_math_equal_calls_each_return_within_their_timeout(warm_pool):
    equivalence.cache_clear()
    elapsed: list[float] = []

    def call(i: int) -> None:
        _, dt = _timed(equivalence.math_equal, f"9^{{9^{{{20 + i}}}}}", f"9^{{9^{{{40 + i}}}}}", timeout=TIMEOUT)
        elapsed.append(dt)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    print(f"\nconcurrent math_equal(timeout={TIMEOUT}) x3: wall per call {sorted(round(x, 2) for x in elapsed)}")
    assert max(elapsed) < TIMEOUT + 0.5
