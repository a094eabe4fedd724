"""math_equal / grade: fast paths, math-verify in worker processes, timeouts, threads."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
import time
from fractions import Fraction

import pytest

from certa.algorithms.answers import verify_pool
from certa.algorithms.answers.equivalence import cache_clear, grade, math_equal, parse_number, shutdown, warm_up

needs_mv = pytest.mark.skipif(importlib.util.find_spec("math_verify") is None,
                              reason="math-verify (extra 'math') not installed")


@pytest.fixture
def no_math_verify(monkeypatch):
    monkeypatch.setattr(verify_pool, "available", lambda: False)
    cache_clear()
    yield
    cache_clear()


@pytest.mark.parametrize("a, b", [
    ("1/2", "0.5"), (r"\frac{1}{2}", "0.5"), (r"\dfrac{1}{2}", ".5"), (r"\frac12", "0.50"),
    (r"-\frac{3}{4}", "-0.75"), (r"\frac{-3}{4}", "-3/4"), ("50\\%", "0.5"), ("50%", "50"),
    ("1,000", "1000"), ("27.0", "27"), ("025", "25"), ("$18$", "18"), (r"\$18.00", "18"),
    (r"90^\circ", "90"), ("0.3333333", "1/3"), (r"\text{Evelyn}", "Evelyn"), ("(C)", "C"),
])
def test_fast_paths_equal(a, b, no_math_verify):
    assert math_equal(a, b)
    assert math_equal(b, a)


@pytest.mark.parametrize("a, b", [
    ("17", "18"), ("0.5", "0.6"), ("1/3", "0.333"), ("", ""), (None, "1"), ("1", None), ("  ", "x"),
])
def test_fast_paths_not_equal(a, b, no_math_verify):
    assert not math_equal(a, b)


def test_without_math_verify_only_fast_paths(no_math_verify):
    assert not warm_up()
    assert not math_equal("(x+1)^2", "x^2+2x+1")
    assert math_equal("2", "2.0")


def test_parse_number():
    assert parse_number("12.5\\%") == (Fraction(25, 2), True)
    assert parse_number(r"-\frac{3}{4}") == (Fraction(-3, 4), False)
    assert parse_number("1/0") is None
    assert parse_number("x") is None
    assert parse_number("9" * 500) is None


def test_import_is_lazy():
    code = ("import sys, certa.algorithms.answers.equivalence as e, certa.algorithms.answers.verify_pool as p; "
            "assert 'math_verify' not in sys.modules; assert p._pool is None; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


@needs_mv
@pytest.mark.parametrize("a, b, want", [
    (r"(x+1)^2", "x^2+2x+1", True),
    (r"3\sqrt{13}", r"\sqrt{117}", True),
    (r"\left( 3, \frac{\pi}{2} \right)", r"(3,\frac{\pi}{2})", True),
    ("x=5", "5", True),
    (r"\frac{14}{3}", r"4\frac{2}{3}", True),
    ("[1,2]", "(1,2)", False),
    (r"\pi", "3.14159", False),
])
def test_math_verify_path(a, b, want):
    cache_clear()
    assert math_equal(a, b) is want


@needs_mv
def test_from_non_main_thread():
    cache_clear()
    results: list[bool] = []
    pairs = [(r"(x+1)^2", "x^2+2x+1"), (r"\sqrt{8}", r"2\sqrt{2}"), ("x^2", "x^3")] * 2
    threads = [threading.Thread(target=lambda a=a, b=b: results.append(math_equal(a, b)))
               for a, b in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [False, False, True, True, True, True]


@needs_mv
def test_timeout_kills_hung_worker_and_recovers():
    cache_clear()
    assert math_equal(r"\sqrt{8}", r"2\sqrt{2}")  # warm a worker so startup is not timed
    start = time.perf_counter()
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(math_equal(r"9^{9^{9}}", r"9^{9^{8}}", timeout=0.5)))
    t.start()
    t.join(30)
    elapsed = time.perf_counter() - start
    assert result == [False]
    assert elapsed < 5.0
    assert math_equal(r"(x+1)^2", "x^2+2x+1")  # a fresh worker replaced the killed one
    start = time.perf_counter()
    assert not math_equal(r"9^{9^{9}}", r"9^{9^{8}}", timeout=0.5)  # cached: no second wait
    assert time.perf_counter() - start < 0.1


@needs_mv
def test_shutdown_and_restart():
    assert warm_up()
    cache_clear()
    assert math_equal(r"\sqrt{4}", r"2\cdot 1")
    shutdown()
    assert verify_pool._pool is None
    cache_clear()
    assert math_equal(r"\sqrt{9}", r"3\cdot 1")
    shutdown()


@pytest.mark.parametrize("pred, gold, dataset, want", [
    ("She makes 9 * 2 = $18 every day.\n#### 18", "18", "gsm8k", True),
    (r"so \boxed{1,000}", "1000", "gsm8k", True),
    ("The answer is 17.", "18", "gsm8k", False),
    ("The answer is 25", "025", "aime24", True),
    (r"\boxed{073}", "073", "aime", True),
    (r"\boxed{27}", 27.0, "amc23", True),
    (r"\boxed{-1}", -1.0, "amc23", True),
    ("There are 9 apples in total.", "9 (apples)", "asdiv", True),
    (r"\boxed{\text{Mrs. Hilt}}", "Mrs. Hilt", "asdiv", True),
    ("5:45", "5:45", "asdiv", True),
    (r"\boxed{\dfrac{14}{3}}", r"\frac{14}{3}", "math500", True),
    (r"\boxed{90}", r"90^\circ", "math", True),
    (r"\boxed{0.5}", r"\frac12", "math500", True),
    ("", "18", "gsm8k", False),
    (None, "18", "gsm8k", False),
    (r"\boxed{18}", "", "gsm8k", False),
    ("a very long text without any answer\n" * 20, "x", "math", False),
])
def test_grade(pred, gold, dataset, want):
    assert grade(pred, gold, dataset) is want


@needs_mv
def test_grade_math_verify():
    cache_clear()
    assert grade(r"... so \boxed{(3, \frac{\pi}{2})}", r"\left( 3, \frac{\pi}{2} \right)", "math500")
    assert grade(r"\boxed{\sqrt{117}}", r"3\sqrt{13}", "math500")
    assert not grade(r"\boxed{\sqrt{116}}", r"3\sqrt{13}", "math500")


def _in_daemon(q):
    q.put(math_equal(r"(x+1)^2", "x^2+2x+1", timeout=10.0))


@needs_mv
def test_works_inside_a_daemonic_forked_process():
    import multiprocessing as mp

    assert math_equal(r"\sqrt{8}", r"2\sqrt{2}")  # the parent has a pool; the child must not reuse it
    cache_clear()
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_in_daemon, args=(q,), daemon=True)
    p.start()
    try:
        assert q.get(timeout=60) is True
    finally:
        p.join(10)
