"""The client's connection: the kubeconfig read (a file that is none is named, never a traceback); the
environment's proxy honoured as client-go honours it (HTTP(S)_PROXY, NO_PROXY), read once when the client is
made. Two small HTTP servers stand in, one for the API server, one for the proxy."""

from __future__ import annotations

import gc
import tempfile
from pathlib import Path

import anyio
import orjson
import pytest
import yaml
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes_asyncio.config import ConfigException

from gangsolve.live.kube import LARGE_BODY, Kube, decode, load_configuration

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")


async def serve(seen: list[str]) -> tuple[web.AppRunner, int]:
    """A server answering every request with an empty NodeList, recording the host each request named."""

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.headers["Host"])
        return web.json_response({"kind": "NodeList", "metadata": {}, "items": []})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


def kubeconfig(path: Path, server: str) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


@pytest.mark.asyncio
@pytest.mark.parametrize("bypassed", [False, True])
async def test_the_environments_proxy_carries_requests_unless_no_proxy_names_the_host(tmp_path, monkeypatch, bypassed):
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.lower(), raising=False)
    to_api, to_proxy = [], []
    api_runner, api_port = await serve(to_api)
    proxy_runner, proxy_port = await serve(to_proxy)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy_port}")
    if bypassed:
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    kube = await Kube.connect(kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{api_port}"))
    monkeypatch.delenv("HTTP_PROXY")  # read once, when the client was made
    try:
        assert (await kube.get("/api/v1/nodes"))["kind"] == "NodeList"
    finally:
        await kube.close()
        await api_runner.cleanup()
        await proxy_runner.cleanup()
    host = f"127.0.0.1:{api_port}"
    assert (to_api, to_proxy) == (([host], []) if bypassed else ([], [host]))


def test_a_large_answer_is_decoded_without_collections_and_kept_from_later_ones():
    items = [
        {"metadata": {"name": f"node-{i}", "labels": {"a": "b"}}, "status": {"capacity": {"cpu": "4"}}}
        for i in range(20_000)
    ]
    body = orjson.dumps({"items": items})
    assert len(body) > LARGE_BODY
    collections: list[str] = []

    def seen(phase: str, _info: dict) -> None:
        if phase == "start":
            collections.append(phase)

    gc.callbacks.append(seen)
    try:
        frozen = gc.get_freeze_count()
        decoded = decode(body)
        assert len(collections) == 0  # 100,000 new containers: about 140 collections with the collector on
        # ... and none of them left for the collector to walk later.
        assert gc.get_freeze_count() - frozen >= 5 * len(items)
        assert decoded == {"items": items}
        assert gc.isenabled()
        with pytest.raises(orjson.JSONDecodeError):
            decode(body[:-1] + b" " * LARGE_BODY)
        assert gc.isenabled()
    finally:
        gc.callbacks.remove(seen)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("- a\n- b\n", "not a mapping of fields (list)"),
        ("clusters: [a\n", "not YAML"),
        ("clusters: 5\ncontexts: 5\ncurrent-context: x\n", "a field has the wrong shape"),
        ("contexts: [{name: x, context: {cluster: c, user: u}}]\nusers: [5]\ncurrent-context: x\n", "wrong shape"),
        ("apiVersion: v1\n", "current-context"),  # the library's own message
    ],
)
@pytest.mark.asyncio
async def test_a_file_that_is_no_kubeconfig_is_named_with_what_is_wrong(tmp_path, text, says):
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(ConfigException) as err:
        await load_configuration(str(path))
    assert str(path) in str(err.value)
    assert says in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.asyncio
async def test_a_kubeconfig_is_read(tmp_path):
    cfg = await load_configuration(kubeconfig(tmp_path / "kubeconfig", "https://10.0.0.1:6443"))
    assert cfg.host == "https://10.0.0.1:6443"


# Documents with a kubeconfig's fields in every shape: each is read, or refused with ConfigException.
_SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
_FIELDS = st.sampled_from(
    [
        "apiVersion",
        "kind",
        "clusters",
        "contexts",
        "users",
        "current-context",
        "name",
        "cluster",
        "context",
        "user",
        "server",
        "token",
        "namespace",
        "certificate-authority-data",
        "insecure-skip-tls-verify",
        "exec",
    ]
)
_DOCUMENTS = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_FIELDS, inner, max_size=4), max_leaves=12
)


@settings(max_examples=150, deadline=None)
@given(_DOCUMENTS)
def test_any_document_is_read_or_refused_with_one_config_error(document):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kubeconfig"
        path.write_text(yaml.safe_dump(document))
        refused: list[ConfigException] = []
        try:
            anyio.run(load_configuration, str(path))
        except ConfigException as exc:  # anything else fails the test
            refused.append(exc)
        assert all(str(path) in str(e) for e in refused)
