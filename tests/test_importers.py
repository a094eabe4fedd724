"""certa traces import: reasoning outputs (shared schemas, vLLM/SGLang/OpenAI shapes) -> traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from certa.eval.errors import TraceFormatError
from certa.eval.importers import Tokenizer, convert_row, import_traces
from certa.eval.replay_eval import Replayer
from certa.eval.traces import load_traces

DATA = Path(__file__).parent / "data" / "reasoning"
APPROX = Tokenizer.approximate()


def _import(tmp_path: Path, name: str, fmt: str = "auto", **kw) -> tuple:
    out = tmp_path / (name + ".out.jsonl")
    tok, interval = kw.pop("tokenizer", APPROX), kw.pop("interval", 8)
    rep = import_traces(DATA / name, out, fmt=fmt, tokenizer=tok, interval=interval, **kw)
    return rep, load_traces(out)


def test_reasoning_schema_splits_think_grades_and_probes(tmp_path):
    rep, probs = _import(tmp_path, "reasoning_gsm8k.jsonl", "reasoning-gsm8k")
    assert rep.written == 2 and rep.skipped == [(3, "no thinking text (failed or empty generation)")]
    p0, p1 = probs
    extra = p0.model_extra
    assert (p0.idx, p0.gold, extra["dataset"], extra["tokenizer"]) == (0, "18", "gsm8k", "approx-chars/4")
    s = p0.samples[0]
    assert not s.text.startswith("<think>") and "</think>" not in s.text
    assert (s.pred, s.correct, s.finished) == ("18", True, True)
    assert p1.samples[0].pred == "6" and not p1.samples[0].correct  # the content's box, graded against gold 5
    # text probes every 8 tokens, zero cost, chars increasing, answers = what the text has committed to
    ats = [q.at for q in s.probes]
    assert ats == list(range(8, s.tokens, 8))
    chars = [q.chars for q in s.probes]
    assert chars == sorted(chars) and chars[-1] <= len(s.text)
    assert all(q.model_extra["tokens"] == 0 and q.model_extra["prompt_tokens"] == 0 for q in s.probes)
    answers = [q.answer for q in s.probes]
    assert answers[0] == "" and answers[-1] == "18" and "7" not in answers  # 3 + 4 = 7 is not a conclusion
    Replayer(probs, "cot")  # CoT replay accepts the file


def test_math500_schema_skips_failed_rows_with_reason(tmp_path):
    rep, probs = _import(tmp_path, "reasoning_math500.jsonl")
    assert rep.written == 1 and len(rep.skipped) == 1
    line, why = rep.skipped[0]
    assert line == 2 and "failed" in why and "timeout" in why
    assert probs[0].model_extra["dataset"] == "math500" and probs[0].samples[0].correct


def test_vllm_several_samples_and_length_cut(tmp_path):
    rep, probs = _import(tmp_path, "vllm.jsonl", "vllm", dataset="gsm8k")
    (p,) = probs
    assert p.idx == 7 and len(p.samples) == 3 and rep.samples == 3
    assert [s.correct for s in p.samples] == [True, False, False]
    assert [s.finished for s in p.samples] == [True, True, False]


def test_sglang_single_and_multi_output_rows(tmp_path):
    _, probs = _import(tmp_path, "sglang.jsonl", "sglang", dataset="gsm8k")
    assert [len(p.samples) for p in probs] == [1, 2]
    assert [s.pred for s in probs[1].samples] == ["3", "4"]


def test_openai_batch_and_plain_responses(tmp_path):
    _, probs = _import(tmp_path, "openai.jsonl", "openai", dataset="gsm8k")
    a, b = probs
    assert (a.idx, a.samples[0].text, a.samples[0].pred) == (11, "7 + 1 = 8. So the answer is 8.", "8")
    assert b.samples[0].text == "9 - 1 = 8." and b.samples[0].correct


def test_auto_detects_each_format(tmp_path):
    for name in ("reasoning_gsm8k.jsonl", "vllm.jsonl", "sglang.jsonl", "openai.jsonl", "reasoning_math500.jsonl"):
        rep, _ = _import(tmp_path, name, "auto")
        assert rep.written >= 1


@pytest.mark.parametrize("content,needle", [
    ("not json\n", "bad.jsonl:1: not JSON"),
    ('[1, 2]\n', "bad.jsonl:1: expected a JSON object"),
    ('{"question": "q", "gold": "1", "outputs": "x"}\n', "bad.jsonl:1: a vLLM output needs"),
])
def test_malformed_rows_raise_ct304_naming_file_and_line(tmp_path, content, needle):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    with pytest.raises(TraceFormatError) as err:
        import_traces(bad, tmp_path / "o.jsonl", fmt="vllm" if "outputs" in content else "auto", tokenizer=APPROX)
    assert err.value.code == "CT304" and needle in str(err.value)


def test_wrong_field_type_names_line(tmp_path):
    with pytest.raises(TraceFormatError, match=r"bad_field.jsonl:2: field 'thinking_content' must be a string"):
        import_traces(DATA / "bad_field.jsonl", tmp_path / "o.jsonl", fmt="reasoning-gsm8k", tokenizer=APPROX)


def test_duplicate_idx_is_an_error(tmp_path):
    row = json.loads((DATA / "reasoning_gsm8k.jsonl").read_text().splitlines()[0])
    src = tmp_path / "dup.jsonl"
    src.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(TraceFormatError, match="dup.jsonl:2: problem idx 0 appears twice"):
        import_traces(src, tmp_path / "o.jsonl", fmt="reasoning-gsm8k", tokenizer=APPROX)


def test_gzip_in_and_out(tmp_path):
    src = tmp_path / "x_gsm8k.jsonl.gz"
    src.write_bytes(gzip.compress((DATA / "reasoning_gsm8k.jsonl").read_bytes()))
    rep = import_traces(src, tmp_path / "t.jsonl.gz", tokenizer=APPROX)
    assert rep.written == 2 and load_traces(tmp_path / "t.jsonl.gz")[0].model_extra["dataset"] == "gsm8k"


def test_convert_row_without_gold_is_skipped():
    problem, why = convert_row({"question": "q", "thinking_content": "x"}, fmt="reasoning-gsm8k", where="f:1", line=1,
                               tokenizer=APPROX, interval=4)
    assert problem is None and "gold" in why


def test_real_tokenizer_counts_and_positions(tmp_path):
    pytest.importorskip("llama_cpp")
    try:
        tok = Tokenizer.default()
    except Exception as exc:  # noqa: BLE001 - no GGUF installed here
        pytest.skip(f"no GGUF vocab: {exc}")
    assert tok.name.endswith(".gguf") and "bpe" in tok.name
    text = "Okay, so 16 - 3 - 4 = 9 eggs. Café ≈ 9 × 2 = 18."
    ends = tok.offsets(text)
    assert len(ends) == tok.count(text) and ends[-1] == len(text) and ends == sorted(ends)
    rep, probs = _import(tmp_path, "reasoning_gsm8k.jsonl", tokenizer=tok, interval=16)
    s = probs[0].samples[0]
    assert probs[0].model_extra["tokenizer"] == tok.name and s.tokens == tok.count(s.text)


def test_cli_import_reports_skips(tmp_path):
    from certa.cli import app
    out = tmp_path / "t.jsonl"
    res = CliRunner().invoke(app, ["traces", "import", "--format", "reasoning-gsm8k", "--interval", "8",
                                   str(DATA / "reasoning_gsm8k.jsonl"), str(out)])
    assert res.exit_code == 0, res.output
    assert "wrote 2 problems" in res.output and "1 rows skipped" in res.output and len(load_traces(out)) == 2
    bad = CliRunner().invoke(app, ["traces", "import", "--format", "reasoning-gsm8k", str(DATA / "bad_field.jsonl"),
                                   str(tmp_path / "o.jsonl")])
    assert bad.exit_code == 2 and "CT304" in bad.output


def test_reserved_rows_are_skipped_unless_asked(tmp_path):
    row = json.loads((DATA / "reasoning_gsm8k.jsonl").read_text().splitlines()[0])
    src = tmp_path / "r_gsm8k.jsonl"
    src.write_text(json.dumps(row) + "\n" + json.dumps({**row, "index": "812"}) + "\n")
    rep = import_traces(src, tmp_path / "o.jsonl", tokenizer=APPROX)
    assert rep.written == 1 and rep.skipped == [(2, "reserved gsm8k row (idx 812 >= 800)")]
    rep = import_traces(src, tmp_path / "o.jsonl", tokenizer=APPROX, keep_reserved=True)
    assert rep.written == 2
