"""Dataset loading: names, idx selection, reserved splits, custom files, errors."""

from __future__ import annotations

import json

import pytest

from certa.eval import datasets as ds
from certa.eval.datasets import Problem, load_dataset
from certa.algorithms.answers.equivalence import grade
from certa.eval.errors import DatasetError


@pytest.fixture(scope="module")
def data():
    try:
        return ds.data_dir()
    except DatasetError:
        pytest.skip("shared/data not found (set CERTA_DATA)")


def test_named_datasets(data):
    sizes = {"gsm8k": 800, "math500": 300, "aime24": 30, "amc23": 40, "asdiv": 2215}
    for name, size in sizes.items():
        problems = load_dataset(name)
        assert len(problems) == size, name
        assert [p.idx for p in problems] == list(range(size))
        assert all(p.dataset == name and p.question and p.gold for p in problems)
        assert all(grade(rf"\boxed{{{p.gold}}}", p.gold, name) for p in problems[:50])


def test_fields_and_quirks(data):
    g = load_dataset("gsm8k", idx=0)[0]
    assert g.gold == "18" and g.question.startswith("Janet") and "####" in g.meta["answer"]
    m = load_dataset("math", idx="0")[0]
    assert m.dataset == "math500" and m.gold == r"\left( 3, \frac{\pi}{2} \right)"
    assert m.meta["level"] == 2 and "solution" in m.meta
    assert load_dataset("aime24", idx=7)[0].gold == "25"
    assert load_dataset("amc", idx=0)[0].gold == "27"
    a = load_dataset("asdiv", idx=0)[0]
    assert a.question == "Seven red apples and two green apples are in the basket. How many apples are in the basket?"
    assert a.gold == "9"


def test_idx_forms(data):
    assert [p.idx for p in load_dataset("amc23", idx="2:8:2")] == [2, 4, 6]
    assert [p.idx for p in load_dataset("amc23", idx=slice(0, 3))] == [0, 1, 2]
    assert [p.idx for p in load_dataset("amc23", idx=range(5, 7))] == [5, 6]
    assert [p.idx for p in load_dataset("amc23", idx=[9, 3])] == [9, 3]
    assert [p.idx for p in load_dataset("amc23", idx="1,4")] == [1, 4]
    assert [p.idx for p in load_dataset("amc23", idx="-2:")] == [38, 39]
    assert [p.idx for p in load_dataset("amc23", idx="30:100")] == list(range(30, 40))
    assert [p.idx for p in load_dataset("gsm8k", idx="0:80", limit=5)] == [0, 1, 2, 3, 4]
    assert load_dataset("gsm8k", limit=0) == []
    for bad in ("x", "1:2:3:4", True, 3.5):
        with pytest.raises(DatasetError):
            load_dataset("amc23", idx=bad)
    with pytest.raises(DatasetError, match="no problem with idx"):
        load_dataset("amc23", idx=40)
    with pytest.raises(DatasetError):
        load_dataset("amc23", limit=-1)


def test_reserved_splits(data):
    for name, cut in (("gsm8k", 800), ("math500", 300)):
        with pytest.raises(DatasetError, match="reserved") as info:
            load_dataset(name, idx=f"{cut - 5}:{cut + 5}")
        assert info.value.code == "CT303"
        with pytest.raises(DatasetError, match="reserved"):
            load_dataset(name, idx=cut)
        assert load_dataset(name, idx=cut, allow_reserved=True)[0].idx == cut
        assert load_dataset(name, idx=f"0:{cut}")[-1].idx == cut - 1
    assert len(load_dataset("gsm8k", allow_reserved=True)) == 1319
    assert len(load_dataset("math500", allow_reserved=True)) == 500
    # a path into a dataset folder is still that dataset, reserved rows included
    assert len(load_dataset(data / "gsm8k" / "test_qwen_idx.jsonl")) == 800


def test_custom_jsonl(tmp_path):
    f = tmp_path / "mine.jsonl"
    f.write_text("\n".join([
        json.dumps({"question": "1+1?", "answer": "2"}),
        "",
        json.dumps({"problem": "2+2?", "gold": 4.0, "idx": 10}),
    ]) + "\n")
    problems = load_dataset(f)
    assert problems == [Problem("mine", 0, "1+1?", "2"), Problem("mine", 10, "2+2?", "4")]
    assert [p.idx for p in load_dataset(str(f), idx=10)] == [10]
    hash(problems[0])


@pytest.mark.parametrize("line, msg", [
    ("{not json", "bad JSON"),
    ("[1, 2]", "JSON object"),
    (json.dumps({"answer": "2"}), "no 'question'"),
    (json.dumps({"question": "q"}), "no 'answer'"),
    (json.dumps({"question": "q", "answer": "1", "idx": "3"}), "'idx' must be an integer"),
])
def test_bad_rows_name_file_and_line(tmp_path, line, msg):
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps({"question": "ok", "answer": "1"}) + "\n" + line + "\n")
    with pytest.raises(DatasetError, match=msg) as info:
        load_dataset(f)
    assert f"{f}:2" in str(info.value)


def test_unknown_and_missing(tmp_path):
    with pytest.raises(DatasetError, match="unknown dataset"):
        load_dataset("gsm9k")
    with pytest.raises(DatasetError, match="no such dataset file"):
        load_dataset(tmp_path / "missing.jsonl")


def test_data_dir_resolution(tmp_path, monkeypatch):
    (tmp_path / "amc23").mkdir()
    (tmp_path / "amc23" / "test.jsonl").write_text(json.dumps({"problem": "p", "answer": 3.0}) + "\n")
    monkeypatch.setenv("CERTA_DATA", str(tmp_path))
    assert ds.data_dir() == tmp_path
    assert load_dataset("amc23")[0].gold == "3"
    monkeypatch.setenv("CERTA_DATA", str(tmp_path / "nope"))
    with pytest.raises(DatasetError, match="CERTA_DATA"):
        ds.data_dir()
    monkeypatch.delenv("CERTA_DATA")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ds, "__file__", str(tmp_path / "pkg" / "datasets.py"))
    if not any((p / "shared" / "data").is_dir() for p in tmp_path.parents):  # e.g. a shared/ beside the clone
        with pytest.raises(DatasetError) as info:
            ds.data_dir()
        assert "CERTA_DATA" in str(info.value)
    (tmp_path / "shared" / "data").mkdir(parents=True)
    assert ds.data_dir() == tmp_path / "shared" / "data"


def test_bundled_sample_stands_in_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("CERTA_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(DatasetError, match="CERTA_DATA"):  # without sample_fallback: an error, as before
        load_dataset("gsm8k")
    notes: list[str] = []
    problems = load_dataset("gsm8k", sample_fallback=notes.append)
    assert [p.idx for p in problems] == list(range(10)) and len(notes) == 1
    assert "using the 10 bundled sample problems" in notes[0] and "CERTA_DATA" in notes[0]
    assert problems[0].gold == "18" and problems[0].question.startswith("Janet")
    assert all(p.dataset == "gsm8k" and p.gold for p in problems)
    more: list[str] = []
    assert len(load_dataset("gsm8k", limit=25, sample_fallback=more.append)) == 10
    assert "limit 25 asks for more than the 10 there are" in more[0]
    assert [p.idx for p in load_dataset("gsm8k", idx="3:5", sample_fallback=notes.append)] == [3, 4]
    with pytest.raises(DatasetError, match="no problem with idx") as info:
        load_dataset("gsm8k", idx=12, sample_fallback=notes.append)
    assert "bundled sample" in (info.value.hint or "")
    with pytest.raises(DatasetError, match="reserved"):
        load_dataset("gsm8k", idx=900, sample_fallback=notes.append)
    with pytest.raises(DatasetError, match="CERTA_DATA"):  # no sample ships for math500
        load_dataset("math500", sample_fallback=notes.append)


def test_bundled_sample_is_the_dev_rows_of_the_full_file(data):
    sample = load_dataset(ds.sample_path("gsm8k"))
    full = load_dataset("gsm8k", idx="0:10")
    assert [(p.idx, p.question, p.gold) for p in sample] == [(p.idx, p.question, p.gold) for p in full]
    assert all(p.idx < ds.RESERVED_FROM["gsm8k"] for p in sample)
    rows = ds.sample_path("gsm8k").read_bytes().splitlines(keepends=True)
    assert rows == (data / "gsm8k" / "test.jsonl").read_bytes().splitlines(keepends=True)[:10]
