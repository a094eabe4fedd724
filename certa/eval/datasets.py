"""Benchmark problems: GSM8K, MATH-500, AIME24, AMC23, ASDiv, or any ``.jsonl`` file.

The data directory is ``$CERTA_DATA`` if set, else the first ``shared/data`` found walking
up from the current directory and from this file (``<repo>/../shared/data``).

**Bundled sample**: the package ships 10 GSM8K development problems (idx 0-9, byte-for-byte
rows of ``gsm8k/test.jsonl``; see ``certa/eval/samples/README.md``). ``load_dataset("gsm8k",
sample_fallback=notice)`` reads them when no data directory is found and tells ``notice`` so;
without ``sample_fallback`` a missing data directory is an error, as before.

**Reserved splits** (never tune on them): GSM8K idx >= 800 and MATH-500 idx >= 300. Asking
for reserved rows raises ``DatasetError`` unless ``allow_reserved=True``; a load without
``idx`` returns only the development rows (idx below the cut) unless ``allow_reserved=True``.

Example:
    >>> probs = load_dataset("gsm8k", idx="0:2")   # doctest: +SKIP
    >>> probs[0].gold, probs[0].idx                 # doctest: +SKIP
    ('18', 0)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Union

from certa.eval.errors import DatasetError

from certa.algorithms.answers import gold_answer

__all__ = ["Problem", "load_dataset", "data_dir", "sample_path", "DATASETS", "SAMPLES", "RESERVED_FROM", "IdxSpec"]

DATASETS: dict[str, str] = {
    "gsm8k": "gsm8k/test.jsonl", "math500": "math500/test.jsonl", "aime24": "aime24/test.jsonl",
    "amc23": "amc23/test.jsonl", "asdiv": "asdiv/test.jsonl",
}
_ALIASES = {"math": "math500", "aime": "aime24", "amc": "amc23"}
SAMPLES: dict[str, str] = {"gsm8k": "gsm8k_sample.jsonl"}
"""Datasets with a sample bundled in the package (``certa/eval/samples/``), development rows only."""
RESERVED_FROM: dict[str, int] = {"gsm8k": 800, "math500": 300}
"""First reserved idx per dataset: rows at or above it are held out for final reports."""

IdxSpec = Union[int, str, range, slice, Iterable[int], None]
_QUESTION_KEYS = ("question", "problem")
_GOLD_KEYS = ("answer", "gold")


@dataclass(frozen=True)
class Problem:
    """One benchmark problem; ``gold`` is comparable with ``grade(pred, gold, dataset)``."""

    dataset: str
    idx: int
    question: str
    gold: str
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)


def data_dir() -> Path:
    """The folder holding ``gsm8k/``, ``math500/``, ...; raises ``DatasetError`` if absent."""
    env = os.environ.get("CERTA_DATA")
    if env:
        path = Path(env).expanduser()
        if path.is_dir():
            return path
        raise DatasetError(f"CERTA_DATA={env!r} is not a directory",
                           hint="point CERTA_DATA at the folder that holds gsm8k/, math500/, ...")
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for folder in (start, *start.parents):
            candidate = folder / "shared" / "data"
            if candidate.is_dir():
                return candidate
    raise DatasetError("cannot find the data directory (shared/data)",
                       hint="set CERTA_DATA to the folder that holds gsm8k/, math500/, ...")


def sample_path(name: str) -> Path:
    """The bundled sample file of dataset ``name`` (raises ``DatasetError`` if none ships).

    >>> sample_path("gsm8k").name
    'gsm8k_sample.jsonl'
    """
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in SAMPLES:
        raise DatasetError(f"no bundled sample for {name!r}", hint=f"samples ship for: {', '.join(SAMPLES)}")
    return Path(__file__).resolve().parent / "samples" / SAMPLES[key]


def _parse_idx(spec: IdxSpec, n: int) -> list[int] | None:
    """Wanted idx values (in the order given), or None for all; ``n`` sizes slices."""
    if spec is None:
        return None
    try:
        if isinstance(spec, bool):
            raise TypeError
        if isinstance(spec, int):
            return [spec + n if spec < 0 else spec]
        if isinstance(spec, str):
            text = spec.strip()
            if ":" in text:
                parts = [int(p) if p.strip() else None for p in text.split(":")]
                if len(parts) > 3:
                    raise ValueError
                return list(range(*slice(*parts).indices(n)))
            if "," in text:
                return [int(p) for p in text.split(",") if p.strip()]
            return _parse_idx(int(text), n)
        if isinstance(spec, slice):
            return list(range(*spec.indices(n)))
        return [int(i) for i in spec]  # range or any iterable of ints
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"bad idx {spec!r}",
                           hint="use an int, '5', '0:80', '1,4,9', a range or a slice") from exc


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"cannot open {path}: {exc.strerror}") from exc
    with handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError) as exc:
                raise DatasetError(f"{path}:{lineno}: bad JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            row["__line__"] = lineno
            rows.append(row)
    return rows


def _problem(row: dict[str, Any], name: str, position: int, path: Path) -> Problem:
    line = row.pop("__line__")
    if name == "asdiv":
        question = f"{row.get('body', '')} {row.get('question', '')}".strip()
        used = ("body", "question")
    else:
        key = next((k for k in _QUESTION_KEYS if isinstance(row.get(k), str)), None)
        if key is None:
            raise DatasetError(f"{path}:{line}: no 'question' or 'problem' field")
        question, used = row[key], (key,)
    if name in DATASETS:
        gold = gold_answer(row, name)
    else:
        raw = next((row[k] for k in _GOLD_KEYS if row.get(k) is not None), None)
        if raw is None:
            raise DatasetError(f"{path}:{line}: no 'answer' or 'gold' field")
        gold = str(int(raw)) if isinstance(raw, float) and raw.is_integer() else str(raw)
    idx = row.get("idx", position)
    if not isinstance(idx, int) or isinstance(idx, bool):
        raise DatasetError(f"{path}:{line}: 'idx' must be an integer, got {idx!r}")
    meta = {k: v for k, v in row.items() if k not in used}
    return Problem(dataset=name, idx=idx, question=question, gold=gold, meta=meta)


def _resolve(name_or_path: str | os.PathLike[str], sample: bool = False) -> tuple[str, Path, str | None]:
    """(dataset name, file, why the bundled sample stands in, or None)."""
    text = os.fspath(name_or_path)
    key = _ALIASES.get(text.lower(), text.lower())
    if key in DATASETS:
        try:
            return key, data_dir() / DATASETS[key], None
        except DatasetError as exc:
            if not sample or key not in SAMPLES:
                raise
            return key, sample_path(key), exc.message
    path = Path(text).expanduser()
    if path.suffix == ".jsonl" or path.is_file():
        if not path.is_file():
            raise DatasetError(f"no such dataset file: {path}")
        parent = path.resolve().parent.name.lower()
        bundled = next((k for k in SAMPLES if path.resolve() == sample_path(k)), None)
        return bundled or (parent if parent in DATASETS else path.stem), path, None
    raise DatasetError(f"unknown dataset {text!r}",
                       hint=f"one of {', '.join(DATASETS)}, or a path to a .jsonl file")


def load_dataset(name_or_path: str | os.PathLike[str], *, idx: IdxSpec = None,
                 limit: int | None = None, allow_reserved: bool = False,
                 sample_fallback: Callable[[str], None] | None = None,
                 allow_with: str = "allow_reserved=True") -> list[Problem]:
    """Load problems by dataset name (``gsm8k``, ``math500``, ``aime24``, ``amc23``,
    ``asdiv``) or from a ``.jsonl`` file with ``question``/``problem`` and ``answer``/``gold``
    fields (optional ``idx``). A file inside a folder named like a dataset is read as that
    dataset, reserved rows included.

    ``idx`` selects by problem idx: ``5``, ``"5"``, ``"0:80"``, ``"1,4,9"``, a ``range`` or a
    ``slice``; ``limit`` keeps the first rows after that.

    ``sample_fallback``: when given and no data directory is found (see :func:`data_dir`), a
    dataset with a bundled sample (:data:`SAMPLES`) is read from it instead, and
    ``sample_fallback`` is called once with a one-line notice saying so, how many sample
    problems there are, and whether ``limit`` asked for more. ``certa run`` prints it on stderr.

    ``allow_with``: how the caller's user allows reserved rows, named in the refusal's hint
    (``certa run`` passes its flag, ``--final``).

    >>> [p.idx for p in load_dataset("amc23", idx="2:8:2")]  # doctest: +SKIP
    [2, 4, 6]
    """
    name, path, why = _resolve(name_or_path, sample=sample_fallback is not None)
    rows = _read_jsonl(path)
    problems = [_problem(row, name, i, path) for i, row in enumerate(rows)]
    size = max((p.idx for p in problems), default=-1) + 1
    wanted = _parse_idx(idx, size)
    cut = RESERVED_FROM.get(name)
    if wanted is not None:
        if cut is not None and not allow_reserved:
            reserved = sorted({i for i in wanted if i >= cut})
            if reserved:
                shown = ", ".join(map(str, reserved[:5])) + (" ..." if len(reserved) > 5 else "")
                raise DatasetError(
                    f"{name} idx >= {cut} is the reserved test split (asked for {shown})",
                    hint=f"develop on idx < {cut}; pass {allow_with} only for final reports")
        order = {i: rank for rank, i in enumerate(dict.fromkeys(wanted))}
        problems = sorted((p for p in problems if p.idx in order), key=lambda p: order[p.idx])
        sliced = isinstance(idx, slice) or (isinstance(idx, str) and ":" in idx)
        if not sliced and len(problems) < len(order):
            missing = sorted(set(order) - {p.idx for p in problems})
            held = f"the {len(rows)} bundled sample problems are idx 0-{len(rows) - 1}; set CERTA_DATA for all" \
                if why else f"{path} holds {len(rows)} problems"
            raise DatasetError(f"{name} has no problem with idx {missing[:5]}", hint=held)
    elif cut is not None and not allow_reserved:
        problems = [p for p in problems if p.idx < cut]
    if limit is not None:
        if limit < 0:
            raise DatasetError(f"limit must be >= 0, got {limit}")
        problems = problems[:limit]
    if why is not None and sample_fallback is not None:
        sample_fallback(_sample_notice(why, len(rows), limit))
    return problems


def _sample_notice(why: str, size: int, limit: int | None) -> str:
    more = f"; limit {limit} asks for more than the {size} there are" if limit is not None and limit > size else ""
    return (f"{why}: using the {size} bundled sample problems{more} "
            f"(set CERTA_DATA to the folder that holds gsm8k/ for the full set)")
