"""certa's per-step overhead in two or more source versions, measured in the same run.

Each version (a git revision, or a directory holding a source tree) is laid out as the
``certa`` package in a temporary directory; samples of ``overhead.time_certa`` (CPU time per
step of the 20-branch SC graph) then run in fresh interpreters, the versions interleaved so
that the machine's load hits all of them alike. Reported: each version's median, min and max,
and its ratio to the first. ``--instructions`` also counts instructions per step with
valgrind (callgrind), which the load does not change: ``Ir(runs=B) - Ir(runs=A)`` over the
``(B - A) x 20`` steps between them.

    python benchmarks/overhead_compare.py --rev HEAD~1 --rev HEAD --json out.json [--samples 9] [--instructions]

Not a timed test; wall-clock noise on a shared machine still shows in the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
# pyproject.toml's package-dir: the top-level folders that are subpackages of certa
MAPPED = ("dsl", "algorithms", "runtime")
SAMPLE = """
import asyncio, sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {bench!r})
import certa.dsl.state, overhead
assert certa.dsl.state.__file__.startswith({pkg!r}), certa.dsl.state.__file__
print(asyncio.run(overhead.time_certa({runs})))
"""


def layout(version: str, into: pathlib.Path) -> pathlib.Path:
    """``into/pkg`` importable as certa from ``version`` (a directory or a git revision)."""
    src = pathlib.Path(version)
    if not src.is_dir():
        src = into / "src"
        src.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", version], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    pkg = into / "pkg"
    shutil.copytree(src / "certa", pkg / "certa")
    for name in MAPPED:
        (pkg / "certa" / name).symlink_to((src / name).resolve(), target_is_directory=True)
    (pkg / "benchmarks").symlink_to((src / "benchmarks").resolve(), target_is_directory=True)
    return pkg


def _python(pkg: pathlib.Path, code: str, prefix: list[str] = ()) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(pkg), "PYTHONHASHSEED": "0"}
    out = subprocess.run([*prefix, sys.executable, "-c", code], cwd=pkg, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"sample failed in {pkg}:\n{out.stderr[-2000:]}")
    return out


def sample_us(pkg: pathlib.Path, runs: int) -> float:
    code = SAMPLE.format(bench=str(pkg / "benchmarks"), pkg=str(pkg), runs=runs)
    return float(_python(pkg, code).stdout.split()[-1])


def instructions_per_step(pkg: pathlib.Path, a: int = 20, b: int = 120) -> float:
    def ir(runs: int) -> int:
        code = SAMPLE.format(bench=str(pkg / "benchmarks"), pkg=str(pkg), runs=runs)
        err = _python(pkg, code, ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]).stderr
        return int(re.search(r"Collected : (\d+)", err).group(1))
    sample_us(pkg, 1)  # writes the bytecode caches: a fresh layout's first run also compiles every module
    first = ir(a)
    return (ir(b) - first) / ((b - a) * 20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", action="append", required=True, help="git revision or source directory (repeat)")
    ap.add_argument("--json", default="overhead_compare.json")
    ap.add_argument("--samples", type=int, default=9, help="samples per version, interleaved")
    ap.add_argument("--runs", type=int, default=300, help="program runs per sample")
    ap.add_argument("--instructions", action="store_true", help="also count instructions per step (valgrind)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="certa-overhead-") as tmp:
        pkgs = [layout(v, pathlib.Path(tmp) / f"v{i}") for i, v in enumerate(args.rev)]
        for pkg in pkgs:
            sample_us(pkg, 1)  # compile the bytecode outside the samples
        load_before = os.getloadavg()
        samples: list[list[float]] = [[] for _ in pkgs]
        for _ in range(args.samples):
            for i, pkg in enumerate(pkgs):
                samples[i].append(sample_us(pkg, args.runs))
        load_after = os.getloadavg()
        ir = [instructions_per_step(p) for p in pkgs] if args.instructions else None
    base = statistics.median(samples[0])
    rows = []
    for i, version in enumerate(args.rev):
        med = statistics.median(samples[i])
        row = {"version": version, "median_us_per_step": round(med, 2), "min_us": round(min(samples[i]), 2),
               "max_us": round(max(samples[i]), 2), "ratio_to_first": round(med / base, 4),
               "samples_us": [round(x, 2) for x in samples[i]]}
        if ir is not None:
            row["instructions_per_step"] = round(ir[i])
            row["instructions_ratio_to_first"] = round(ir[i] / ir[0], 4)
        rows.append(row)
        print(json.dumps(row))
    out = {"versions": rows, "clock": "process_time", "runs": args.runs, "samples": args.samples,
           "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in load_after],
           "cpus": os.cpu_count()}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
