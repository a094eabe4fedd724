"""The first run works anywhere: the bundled GSM8K sample, --version, and a --backend typo
reported before a missing data directory."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tomllib

import pytest
from typer.testing import CliRunner

import certa
from certa.cli import app
from certa.eval import datasets as ds

ROOT = pathlib.Path(__file__).parent.parent
runner = CliRunner()


@pytest.fixture
def no_data(tmp_path, monkeypatch):
    """A temp working dir with CERTA_DATA pointing nowhere: no data directory is found."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CERTA_DATA", str(tmp_path / "nowhere"))
    return tmp_path


def test_tutorial_first_run_outside_the_tree(tmp_path):
    """The tutorial's command, in a fresh process, from a temp dir, without a data directory."""
    env = {**os.environ, "CERTA_DATA": str(tmp_path / "nowhere")}
    proc = subprocess.run([sys.executable, "-m", "certa.cli", "run", "sc", "--dataset", "gsm8k", "--limit", "3",
                           "--backend", "scripted"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "using the 10 bundled sample problems" in proc.stderr
    assert "CT303" not in proc.stderr
    assert "problems" in proc.stdout and "accuracy" in proc.stdout


def test_limit_beyond_the_sample_says_how_many(no_data):
    r = runner.invoke(app, ["run", "sc", "--dataset", "gsm8k", "--limit", "25", "--backend", "scripted"])
    assert r.exit_code == 0, r.output
    assert "25" in r.output and "10 bundled sample problems" in r.output
    assert "on 10 gsm8k problems" in r.output


def test_backend_typo_is_reported_before_the_missing_data_dir(no_data):
    r = runner.invoke(app, ["run", "sc", "--dataset", "gsm8k", "--limit", "1", "--backend", "scriptd"])
    assert r.exit_code == 2
    assert "unknown backend 'scriptd'" in r.output and "scripted" in r.output
    assert "CT303" not in r.output and "data directory" not in r.output


def test_backend_typo_is_reported_before_a_missing_dataset(no_data):
    r = runner.invoke(app, ["run", "sc", "--dataset", "math500", "--backend", "scriptd"])
    assert r.exit_code == 2 and "unknown backend 'scriptd'" in r.output and "CT303" not in r.output


def test_other_datasets_still_need_the_data_dir(no_data):
    r = runner.invoke(app, ["run", "sc", "--dataset", "math500", "--limit", "1", "--backend", "scripted"])
    assert r.exit_code == 2 and "CT303" in r.output and "CERTA_DATA" in r.output


def test_version_flag():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0
    assert r.output.strip() == f"certa {certa.__version__}"
    assert certa.__version__ == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_version_flag_of_the_console_script():
    proc = subprocess.run([sys.executable, "-m", "certa.cli", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == f"certa {certa.__version__}"


def test_sample_ships_as_package_data():
    """pyproject's package-data globs cover the sample and its README, so a wheel carries them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir = pathlib.Path(ds.__file__).parent
    globs = config["package-data"]["certa.eval"]
    shipped = {p.name for g in globs for p in package_dir.glob(g)}
    assert {"gsm8k_sample.jsonl", "README.md"} <= shipped
    assert "certa.eval" in config["packages"]
