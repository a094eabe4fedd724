"""``certa serve`` API keys (issue 20, item 4): 401 in OpenAI's shape without a valid key,
several keys from flags, a key file and ``$CERTA_API_KEY``, constant-time comparison,
``/health`` open, ``/metrics`` behind the key unless made public, loopback by default."""

from __future__ import annotations

import hmac
import inspect

import pytest

openai = pytest.importorskip("openai", reason="the openai client is not installed (pip install 'certa[server-test]')")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install 'certa[serve]')")

import certa as ct  # noqa: E402
from certa.runtime.errors import ConfigError  # noqa: E402
from certa.serve import Server  # noqa: E402
from certa.serve.auth import KeyCheck, load_api_keys  # noqa: E402
from certa.serve.launch import start_background  # noqa: E402

QUESTION = [{"role": "user", "content": "What is 9 * 2?"}]


def server() -> Server:
    return Server("sc", ct.ScriptedBackend(responses=["so \\boxed{18}."]), max_knob=8)


@pytest.fixture(scope="module")
def guarded():
    with start_background(server(), api_keys=["key-one", "key-two"]) as bg:
        yield bg


def test_requests_without_a_valid_key_get_401_in_openai_shape(guarded):
    for key in ("wrong", "key-one-", "key-on"):
        c = openai.OpenAI(base_url=guarded.base_url, api_key=key, max_retries=0)
        with pytest.raises(openai.AuthenticationError) as info:
            c.chat.completions.create(model="sc", messages=QUESTION)
        assert info.value.status_code == 401 and info.value.body["code"] == "CT414"
        assert info.value.body["type"] == "invalid_request_error"
    r = httpx.post(guarded.base_url + "/chat/completions", json={"model": "sc", "messages": QUESTION})
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    assert r.json()["error"]["message"].startswith("a valid API key is required") and r.headers["x-request-id"]
    assert httpx.get(guarded.base_url + "/models").status_code == 401
    r = httpx.get(guarded.base_url + "/models", headers={"Authorization": "Basic key-one"})
    assert r.status_code == 401, "only the Bearer scheme is accepted"


def test_every_configured_key_works(guarded):
    for key in ("key-one", "key-two"):
        c = openai.OpenAI(base_url=guarded.base_url, api_key=key, max_retries=0)
        assert c.chat.completions.create(model="sc", messages=QUESTION).choices[0].message.content == "\\boxed{18}"
        assert [m.id for m in c.models.list()] == ["sc"]


def test_health_is_open_and_metrics_need_the_key(guarded):
    assert httpx.get(guarded.url + "/health").json()["status"] == "ok"
    assert httpx.get(guarded.url + "/metrics").status_code == 401
    r = httpx.get(guarded.url + "/metrics", headers={"Authorization": "Bearer key-two"})
    assert r.status_code == 200 and "certa_" in r.text


def test_public_metrics_and_no_keys_means_open():
    with start_background(server(), api_keys=["k"], public_metrics=True) as bg:
        assert httpx.get(bg.url + "/metrics").status_code == 200
        assert httpx.get(bg.base_url + "/models").status_code == 401
    with start_background(server()) as bg:
        assert httpx.get(bg.base_url + "/models").status_code == 200


def test_keys_from_flags_file_and_environment(tmp_path):
    f = tmp_path / "keys"
    f.write_text("# one key a line\nfile-key-1\n\n  file-key-2  \n")
    keys = load_api_keys(["flag-key", "file-key-1"], f, env={"CERTA_API_KEY": "env-1,env-2"})
    assert keys == ("flag-key", "file-key-1", "file-key-2", "env-1", "env-2")
    assert load_api_keys(env={}) == ()
    with pytest.raises(ConfigError, match="cannot read"):
        load_api_keys(key_file=tmp_path / "missing", env={})
    (tmp_path / "empty").write_text("# nothing\n")
    with pytest.raises(ConfigError, match="no keys"):
        load_api_keys(key_file=tmp_path / "empty", env={})
    with pytest.raises(ConfigError, match="spaces"):
        load_api_keys(["two words"], env={})


def test_comparison_is_constant_time_over_every_key(monkeypatch):
    calls = []
    real = hmac.compare_digest

    def counting(a, b):
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    check = KeyCheck(["a", "bb", "a-much-longer-key"])
    for header in (b"Bearer a", b"Bearer nope", b"Bearer " + b"x" * 1000, b""):
        calls.clear()
        check.matches(header)
        assert calls == [(32, 32)] * 3, "every key compared, digests of equal length, no early exit"


def test_cli_binds_loopback_by_default_and_takes_keys():
    from certa.cli.serve import serve
    params = inspect.signature(serve).parameters
    assert params["host"].default.default == "127.0.0.1"
    for name in ("api_key", "api_key_file", "public_metrics"):
        assert name in params
