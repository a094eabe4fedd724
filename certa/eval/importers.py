r"""Import reasoning-model outputs (long ``<think>`` chains) into certa's trace format.

``certa traces import --format FMT IN OUT`` reads JSONL (plain or gzip) written by other
tools and writes one trace problem a line (:mod:`certa.eval.traces`), each chain a probed
sample with **text probes** every ``interval`` tokens: at each position the sample's ``chars``
(its text's length there) and ``answer``, the answer the chain has committed to so far
(:func:`~certa.algorithms.signals.text.committed_answer`), with zero decode and prefill cost
(``tokens``/``prompt_tokens`` 0, ``kind: "text"``): reading the stream costs nothing.

Formats (``auto`` picks by the first row's fields):

* ``reasoning-gsm8k`` / ``reasoning-aime`` / ``reasoning-math500``: ``question``,
  ``ref_answer`` (gold), ``thinking_content``, ``content`` (the answer after the thinking),
  ``index``; or ``problem``, ``full_reasoning``, ``result``, ``gold`` (MATH-500's schema,
  idx = the problem's position in the MATH-500 test file, by ``unique_id`` or text);
* ``vllm``: ``{"prompt", "outputs": [{"text", "finish_reason"}...]}`` (several samples);
* ``sglang``: ``{"text", "meta_info": {"finish_reason"}}`` or a list of them under ``outputs``;
* ``openai``: a chat/completions response (``choices[].message.content`` /
  ``reasoning_content``, ``choices[].text``), bare or under ``response.body`` (batch output).

Gold and question come from the row (``gold``/``ref_answer``/``answer``, ``question``/
``problem``/``prompt``). The thinking is split from the final answer at ``</think>`` (or the
``reasoning_content`` field); ``pred`` is extracted from the final answer (else the thinking)
and graded with :func:`~certa.algorithms.answers.grade` for the dataset. Token counts use the
Qwen2.5 BPE that certa's GGUF carries, loaded vocab-only (:class:`Tokenizer`; the trace's
``tokenizer`` field says which was used; without llama_cpp an approximate count, labelled
``approx-chars/4``). A malformed row raises :class:`~certa.eval.errors.TraceFormatError`
(CT304) naming file and line; a well-formed row that cannot be used (no thinking text, no
gold, a reserved-split row) is skipped and listed in the report with its reason.

Example:
    >>> import json, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> row = {"index": "0", "question": "What is 9 * 2?", "ref_answer": "18",
    ...        "thinking_content": "<think>9 * 2 = 18. So the answer is 18.\n</think>", "content": "\\boxed{18}"}
    >>> _ = (d / "in.jsonl").write_text(json.dumps(row) + "\n")
    >>> rep = import_traces(d / "in.jsonl", d / "out.jsonl", fmt="reasoning-gsm8k", interval=4,
    ...                     tokenizer=Tokenizer.approximate())
    >>> rep.written, rep.skipped, rep.tokenizer
    (1, [], 'approx-chars/4')
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from certa.eval.datasets import RESERVED_FROM
from certa.eval.errors import TraceFormatError
from certa.eval.traces import TraceProblem, open_text

from certa.algorithms.answers import extract_answer, grade
from certa.algorithms.signals.text import committed_answer

__all__ = ["FORMATS", "ImportReport", "Tokenizer", "convert_row", "import_traces"]

FORMATS: tuple[str, ...] = ("reasoning-gsm8k", "reasoning-aime", "reasoning-math500", "vllm", "sglang", "openai",
                            "auto")
_DATASET = {"reasoning-gsm8k": "gsm8k", "reasoning-aime": "aime", "reasoning-math500": "math500"}


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    try:
        fd, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)


class Tokenizer:
    """Token counts and token→char positions for chains.

    :meth:`default` loads the Qwen2.5 BPE from certa's installed GGUF vocab-only (no weights);
    :meth:`approximate` counts 4 characters a token and says so in its ``name``.
    """

    def __init__(self, name: str, encode: Any | None = None, piece: Any | None = None) -> None:
        self.name, self._encode, self._piece = name, encode, piece

    @classmethod
    def approximate(cls) -> "Tokenizer":
        return cls("approx-chars/4")

    @classmethod
    @functools.cache
    def default(cls, model: str | None = None) -> "Tokenizer":
        """The GGUF's tokenizer (``model``: path or known name, default the small model), else approximate."""
        try:
            import llama_cpp
        except ImportError:
            return cls.approximate()
        from certa.runtime.model_source import open_model
        with open_model(model or "qwen2.5-coder-0.5b") as src, _quiet_stderr():  # no copy of an installed model
            llm = llama_cpp.Llama(model_path=str(src.path), vocab_only=True, verbose=False)
        kind = llm.metadata.get("tokenizer.ggml.pre", "bpe")
        piece = functools.lru_cache(maxsize=None)(lambda t: llm.detokenize([t]))
        return cls(f"{kind}-bpe:{src.name}", lambda b: llm.tokenize(b, add_bos=False, special=False), piece)

    def count(self, text: str) -> int:
        """Tokens of ``text``."""
        if self._encode is None:
            return math.ceil(len(text) / 4)
        return len(self._encode(text.encode("utf-8"))) if text else 0

    def offsets(self, text: str) -> list[int]:
        """Char offset after each token of ``text`` (``len`` = the token count)."""
        if self._encode is None:
            n = math.ceil(len(text) / 4)
            return [min(len(text), 4 * (i + 1)) for i in range(n)]
        raw = text.encode("utf-8")
        char_at = [0] * (len(raw) + 1)  # byte offset -> chars fully before it
        pos = 0
        for i, ch in enumerate(text):
            w = len(ch.encode("utf-8"))
            for j in range(1, w + 1):
                char_at[pos + j] = i + (j == w)
            pos += w
        out, b = [], 0
        for tok in self._encode(raw):
            b = min(len(raw), b + len(self._piece(tok)))
            out.append(char_at[b])
        return out


@dataclass
class ImportReport:
    """What an import wrote and what it skipped (``(line, reason)``), and the tokenizer used."""

    written: int = 0
    samples: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)
    tokenizer: str = ""
    out: str = ""


@dataclass(frozen=True)
class _Chain:
    thinking: str
    answer: str
    finished: bool


def _split(text: str, reasoning: str | None = None) -> tuple[str, str, bool]:
    """(thinking, final answer, whether the thinking was closed)."""
    if reasoning:
        return reasoning.replace("<think>", "").replace("</think>", "").strip("\n"), text or "", True
    text = text or ""
    if "</think>" in text:
        think, _, ans = text.partition("</think>")
        return think.replace("<think>", "").strip("\n"), ans, True
    return text.replace("<think>", "").strip("\n"), "", False


def _text(v: Any, what: str, where: str) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise TraceFormatError(f"{where}: field {what!r} must be a string, got {type(v).__name__}")
    return v


def _chains(row: dict[str, Any], fmt: str, where: str) -> list[_Chain]:
    """The row's chains in ``fmt`` (TraceFormatError when the shape is wrong)."""
    if fmt.startswith("reasoning-"):
        if "full_reasoning" in row or "problem" in row and "thinking_content" not in row:
            think = _text(row.get("full_reasoning"), "full_reasoning", where)
            result = _text(row.get("result"), "result", where)
            ok = row.get("status", "success") == "success"
        else:
            think = _text(row.get("thinking_content"), "thinking_content", where)
            result = _text(row.get("content"), "content", where)
            ok = True
        closed = "</think>" in think or bool(result)
        thinking, tail, _ = _split(think)
        return [_Chain(thinking, (tail + "\n" + result).strip(), ok and closed)] if thinking else []
    outputs = _outputs(row, fmt, where)
    out = []
    for o in outputs:
        if not isinstance(o, dict):
            raise TraceFormatError(f"{where}: each output must be an object, got {type(o).__name__}")
        msg = o.get("message") if isinstance(o.get("message"), dict) else {}
        text = _text(msg.get("content") if msg else o.get("text"), "text", where)
        reasoning = msg.get("reasoning_content") or msg.get("reasoning") if msg else o.get("reasoning_content")
        thinking, answer, closed = _split(text, _text(reasoning, "reasoning_content", where) or None)
        finish = o.get("finish_reason")
        if isinstance(o.get("meta_info"), dict):
            finish = o["meta_info"].get("finish_reason")
        if isinstance(finish, dict):
            finish = finish.get("type")
        out.append(_Chain(thinking, answer, closed and finish in (None, "stop", "eos", "end_turn")))
    return out


def _outputs(row: dict[str, Any], fmt: str, where: str) -> list[Any]:
    if fmt == "openai":
        body = row.get("response", {}).get("body", row) if isinstance(row.get("response"), dict) else row
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or not choices:
            raise TraceFormatError(f"{where}: an OpenAI response needs a non-empty 'choices' list")
        return choices
    if fmt == "vllm":
        outs = row.get("outputs")
        if not isinstance(outs, list) or not outs:
            raise TraceFormatError(f"{where}: a vLLM output needs a non-empty 'outputs' list")
        return outs
    outs = row.get("outputs", [row] if "text" in row else None)  # sglang: one output, or several
    if not isinstance(outs, list) or not outs:
        raise TraceFormatError(f"{where}: an SGLang output needs 'text' or a non-empty 'outputs' list")
    return outs


def detect(row: dict[str, Any], where: str = "<row>") -> str:
    """The format a row is in (``auto``), or TraceFormatError."""
    shared = "thinking_content" in row or "full_reasoning" in row
    if shared or "problem" in row and ("result" in row or "status" in row):
        return "reasoning"
    if "choices" in row or isinstance(row.get("response"), dict):
        return "openai"
    if isinstance(row.get("outputs"), list) and row["outputs"] and isinstance(row["outputs"][0], dict) \
            and "meta_info" in row["outputs"][0] or "meta_info" in row:
        return "sglang"
    if isinstance(row.get("outputs"), list):
        return "vllm"
    raise TraceFormatError(f"{where}: cannot tell the format of this row (fields {', '.join(sorted(row)[:8])})",
                           hint=f"pass --format, one of {', '.join(FORMATS)}")


def _gold(row: dict[str, Any], dataset: str) -> str | None:
    for key in ("gold", "ref_answer", "answer"):
        v = row.get(key)
        if v is not None and not isinstance(v, (dict, list)):
            s = str(v)
            return s.rsplit("####", 1)[-1].strip().replace(",", "") if "####" in s else s.strip()
    return None


@functools.cache
def _math500_index() -> dict[str, int]:
    """MATH-500 problem text and unique_id -> position in the test file (empty if absent)."""
    from certa.eval.datasets import data_dir
    try:
        path = data_dir() / "math500" / "test.jsonl"
        rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    except Exception:  # noqa: BLE001 - no dataset: positions are line numbers
        return {}
    out: dict[str, int] = {}
    for i, r in enumerate(rows):
        out[str(r.get("unique_id"))] = i
        out[str(r.get("problem", "")).strip()] = i
    return out


def _idx(row: dict[str, Any], dataset: str, line: int) -> int | str:
    if dataset == "math500":
        pos = _math500_index()
        for key in (row.get("unique_id"), str(row.get("problem", "")).strip()):
            if key is not None and str(key) in pos:
                return pos[str(key)]
    for key in ("idx", "index", "id", "custom_id"):
        v = row.get(key)
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, int) or (isinstance(v, str) and v.strip().isdigit()):
            return int(v)
        if isinstance(v, str) and v:
            return v
    return line - 1


def _sample(chain: _Chain, tok: Tokenizer, interval: int, dataset: str, question: str, gold: str) -> dict[str, Any]:
    ends = tok.offsets(chain.thinking)
    probes = []
    for at in range(interval, len(ends), interval):
        chars = ends[at - 1]
        probes.append({"at": at, "chars": chars, "tokens": 0, "prompt_tokens": 0, "kind": "text",
                       "answer": committed_answer(chain.thinking[:chars], dataset=dataset, question=question)})
    pred = extract_answer(chain.answer, dataset) or extract_answer(chain.thinking, dataset)
    return {"tokens": len(ends), "finished": chain.finished, "pred": pred,
            "correct": bool(pred) and bool(grade(pred, gold, dataset)), "text": chain.thinking,
            "answer_tokens": tok.count(chain.answer), "probes": probes}


def convert_row(row: Any, *, fmt: str, where: str, line: int, tokenizer: Tokenizer, interval: int,
                dataset: str | None = None, model: str = "") -> tuple[dict[str, Any] | None, str]:
    """One input row as a trace problem dict, or ``(None, reason)`` when it must be skipped."""
    if not isinstance(row, dict):
        raise TraceFormatError(f"{where}: expected a JSON object, got {type(row).__name__}")
    kind = fmt if fmt != "auto" else detect(row, where)
    ds = dataset or _DATASET.get(kind) or str(row.get("dataset") or "") or _guess_dataset(where)
    if row.get("status") not in (None, "success"):
        return None, f"generation status {row.get('status')!r}: {str(row.get('error', ''))[:80]}"
    question = _text(row.get("question") or row.get("problem") or row.get("prompt"), "question", where)
    gold = _gold(row, ds)
    if gold is None or gold == "":
        return None, "no gold answer (gold/ref_answer/answer)"
    chains = _chains(row, kind if not kind.startswith("reasoning") else "reasoning-", where)
    chains = [c for c in chains if c.thinking.strip()]
    if not chains:
        return None, "no thinking text (failed or empty generation)"
    samples = [_sample(c, tokenizer, interval, ds, question, gold) for c in chains]
    return {"idx": _idx(row, ds, line), "gold": gold, "model": model or str(row.get("model") or ""),
            "interval": interval, "dataset": ds, "question": question, "tokenizer": tokenizer.name,
            "probe_kind": "text", "samples": samples}, ""


def _guess_dataset(where: str) -> str:
    """The dataset a file name names (gsm8k, aime, math500), else math."""
    low = where.lower()
    return next((d for d in ("gsm8k", "aime", "math500") if d in low), "math")


def _rows(path: Path) -> Iterator[tuple[int, Any]]:
    if not path.is_file():
        raise TraceFormatError(f"input file {str(path)!r} does not exist")
    try:
        with open_text(path) as fh:
            for no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    yield no, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TraceFormatError(f"{path.name}:{no}: not JSON ({exc.msg} at column {exc.colno})") from None
    except (UnicodeDecodeError, OSError, EOFError) as exc:
        raise TraceFormatError(f"{path.name}: not a UTF-8 JSONL file ({type(exc).__name__}: {exc})") from None


def _model_name(path: Path) -> str:
    name = path.name.split(".jsonl")[0]
    return name.rsplit("_", 1)[0] if "_" in name else name


def import_traces(src: str | Path, out: str | Path, *, fmt: str = "auto", interval: int = 32,
                  dataset: str | None = None, model: str | None = None, tokenizer: Tokenizer | None = None,
                  limit: int | None = None, keep_reserved: bool = False) -> ImportReport:
    """Convert ``src`` into a trace file at ``out`` (``.gz``: compressed); see the module docstring.

    Rows of a reserved split (GSM8K idx >= 800, MATH-500 idx >= 300) are skipped, with that
    reason, unless ``keep_reserved`` (they are for final reports, never for calibration)."""
    if fmt not in FORMATS:
        raise TraceFormatError(f"unknown import format {fmt!r}", hint=f"one of {', '.join(FORMATS)}")
    if interval < 1:
        raise TraceFormatError(f"--interval must be >= 1, got {interval}")
    src, out = Path(src), Path(out)
    tok = tokenizer or Tokenizer.default()
    rep = ImportReport(tokenizer=tok.name, out=str(out))
    seen: set[str] = set()
    lines: list[str] = []
    for no, row in _rows(src):
        where = f"{src.name}:{no}"
        problem, why = convert_row(row, fmt=fmt, where=where, line=no, tokenizer=tok, interval=interval,
                                   dataset=dataset, model=model or _model_name(src))
        if problem is None:
            rep.skipped.append((no, why))
            continue
        cut = RESERVED_FROM.get(str(problem["dataset"]).lower())
        if cut is not None and isinstance(problem["idx"], int) and problem["idx"] >= cut and not keep_reserved:
            rep.skipped.append((no, f"reserved {problem['dataset']} row (idx {problem['idx']} >= {cut})"))
            continue
        if str(problem["idx"]) in seen:
            raise TraceFormatError(f"{where}: problem idx {problem['idx']!r} appears twice")
        seen.add(str(problem["idx"]))
        text = json.dumps(problem, ensure_ascii=False)
        TraceProblem.model_validate_json(text)  # what load_traces will accept
        lines.append(text)
        rep.written += 1
        rep.samples += len(problem["samples"])
        if limit is not None and rep.written >= limit:
            break
    out.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if out.name.endswith(".gz") else open
    with opener(out, "wt", encoding="utf-8") as fh:  # type: ignore[operator]
        fh.write("".join(x + "\n" for x in lines))
    return rep
