"""One extension mechanism: every table is a Registry, filled by explicit register() calls."""

from __future__ import annotations

import ast
import importlib.util
import pathlib
import subprocess
import sys

import pytest

from certa.algorithms.policies import STOPPING_POLICIES, policy_from_dict
from certa.algorithms.programs.library import PROGRAMS
from certa.algorithms.signals import COT_SIGNALS, signal_from_dict
from certa.runtime.backends.registry import BACKENDS
from certa.runtime.errors import ConfigError
from certa.runtime.policy import EXIT_REASONS, ExitReason, Policy, StopReason, Threshold
from certa.runtime.registry import Registry
from certa.runtime.scheduling.policies import POLICIES

TABLES = {"programs": PROGRAMS, "backends": BACKENDS, "scheduling": POLICIES, "stopping": STOPPING_POLICIES,
          "cot signals": COT_SIGNALS}


def test_unknown_names_list_the_choices():
    for table in TABLES.values():
        with pytest.raises(ConfigError) as err:
            table.get("no-such-name")
        assert err.value.code == "CT300" and f"unknown {table.kind} 'no-such-name'" in str(err.value)
        assert err.value.hint == f"choose one of: {table.choices()}"
    with pytest.raises(ConfigError, match="unknown policy kind"):
        STOPPING_POLICIES.get(["unhashable"])  # a JSON list where a kind belongs


def test_register_refuses_duplicates_and_bad_lazy_targets():
    r: Registry[int] = Registry("thing")
    r.register("one", lambda: 1)
    with pytest.raises(ConfigError, match="registered twice"):
        r.register("one", lambda: 2)
    with pytest.raises(ConfigError, match="module:attr"):
        r.register("two", "no_colon_here")
    r.register("gone", "certa_no_such_module:thing", install="pip install thing")
    with pytest.raises(ConfigError, match="not available") as err:
        r.get("gone")
    assert err.value.hint == "pip install thing"


def test_every_entry_has_help_and_a_target_that_exists():
    for name, table in TABLES.items():
        for entry in (table.entry(n) for n in table):
            assert entry.help and "\n" not in entry.help, (name, entry.name)
            if isinstance(entry.target, str):  # check it without importing a heavy engine
                module, _, attr = entry.target.partition(":")
                spec = importlib.util.find_spec(module)
                assert spec and spec.origin, entry.target
                tree = ast.parse(pathlib.Path(spec.origin).read_text(encoding="utf-8"))
                defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
                assert attr in defined, entry.target


def test_stopping_policy_kinds_match_to_dict():
    for kind in STOPPING_POLICIES:
        assert STOPPING_POLICIES.get(kind).kind == kind
    assert STOPPING_POLICIES.names()[:4] == ["threshold", "even", "length", "watch"]
    assert type(policy_from_dict({"kind": "margin", "margin": 2})).__name__ == "MajorityMargin"
    assert isinstance(Policy.from_dict({"kind": "threshold", "tau": 0.5}, STOPPING_POLICIES), Threshold)


def test_policy_from_dict_without_the_table_is_deprecated_and_knows_only_the_runtimes_kinds():
    with pytest.warns(DeprecationWarning, match="ct.policy_from_dict"):
        assert isinstance(Policy.from_dict({"kind": "threshold", "tau": 0.5}), Threshold)
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError, match="unknown policy kind 'esc'"):
        Policy.from_dict({"kind": "esc"})


def test_every_policy_declares_its_fields_units_and_every_exit_reason_is_explained():
    """One home for how a program stops: a policy's to_dict fields name units the server bounds,
    each reason a policy gives is an ExitReason, and EXIT_REASONS explains every one."""
    import typing
    assert set(EXIT_REASONS) == set(typing.get_args(ExitReason)) >= set(typing.get_args(StopReason))
    for kind in STOPPING_POLICIES:
        cls = STOPPING_POLICIES.get(kind)
        assert set(cls.fields.values()) <= {"knob", "tokens", "fraction"}, kind
        reason = getattr(cls, "reason", None)
        assert reason is None or reason in typing.get_args(StopReason), kind


def _stdout_of_fresh_python(code: str) -> str:
    """Run ``code`` in a new interpreter (nothing imported yet) and return its stripped stdout."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_registration_is_explicit_not_an_import_side_effect():
    """Importing the rest of the library (or defining a Policy subclass) adds nothing to the table."""
    code = ("from certa.algorithms.policies import STOPPING_POLICIES\nfrom certa.runtime.policy import Policy\n"
            "before = STOPPING_POLICIES.names()\n"
            "import certa.algorithms.programs.library, certa.algorithms.signals, certa.serve\n"
            "class Mine(Policy):\n    kind = 'mine'\n    def decide(self, program): ...\n"
            "assert STOPPING_POLICIES.names() == before, STOPPING_POLICIES.names()\n"
            "print('mine' in STOPPING_POLICIES)\n")
    assert _stdout_of_fresh_python(code) == "False"


def test_listing_programs_imports_no_program():
    code = ("import sys\nfrom certa.algorithms.programs.library import PROGRAMS, describe\n"
            "[describe(n) for n in PROGRAMS]\n"
            "print(sorted(m for m in sys.modules if m.startswith(('certa.dsl', 'certa.algorithms.programs.'))))")
    assert _stdout_of_fresh_python(code) == "['certa.algorithms.programs.library']"


def test_cot_signal_kinds_resolve_without_importing_their_module_first():
    """``committed`` lives in signals/text.py; the table names it, no import side effect needed."""
    code = ("import sys\nfrom certa.algorithms.signals import signal_from_dict\n"
            "assert 'certa.algorithms.signals.text' not in sys.modules\n"
            "print(type(signal_from_dict({'kind': 'committed', 'confirm': 2})).__name__)")
    assert _stdout_of_fresh_python(code) == "Committed"
    for kind in COT_SIGNALS:
        if kind not in ("all", "any"):  # compositions need parts
            assert COT_SIGNALS.get(kind).kind == kind
            assert signal_from_dict(COT_SIGNALS.make(kind).to_dict()).kind == kind


def test_cli_model_and_url_options_map_to_the_same_constructor_names_for_every_backend():
    import inspect

    from certa.runtime.backends.registry import cli_options as backend_options
    assert backend_options("sglang-http", None, "http://a:1,http://b:2") == {"base_url": ["http://a:1", "http://b:2"]}
    assert backend_options("openai", "ignored", "http://a:1") == {"base_url": "http://a:1"}
    assert backend_options("sglang", "/models/qwen", None) == backend_options("llamacpp", "/models/qwen", None) \
        == {"model": "/models/qwen"}
    for name in BACKENDS:
        try:
            params = inspect.signature(BACKENDS.get(name)).parameters
        except ConfigError:  # the engine's extra is not installed here
            continue
        wanted = {"llamacpp": {"model"}, "sglang": {"model"}, "openai": {"base_url"}, "sglang-http": {"base_url"}}
        assert wanted.get(name, set()) <= set(params), (name, params)
