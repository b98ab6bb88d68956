"""Never send a request that must fail, against a provider that counts as OpenAI does.

:class:`~tests.integration.api.strict_provider.StrictProvider` counts each prompt with a real
BPE, the tools, a response schema, images and the reserved output included, and refuses one
over the window with 400 ``context_length_exceeded``. Every request here must either reach it
and fit, or be refused by the proxy itself; with the real tokenizer loaded and with the
calibrated estimate (``CASCADE_TOKENIZER=``) before any calibration.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bpe_openai
import httpx
import openai
import pytest
import tiktoken
import tiktoken.registry

from proxy.settings import Settings
from tests.fakes.replies import Error, RecordedRequest, Reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import FAST, Agent, Model, stack, words
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.strict_provider import StrictProvider, png_data_url

LIMIT, RESERVED = 4000, 500
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


_KEPT: dict[str, tiktoken.Encoding] = {}
"""The encoding the first ``bpe`` test's proxy loaded, handed to the later ones."""


@pytest.fixture(scope="module")
def o200k_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``TIKTOKEN_CACHE_DIR`` holding ``o200k_base``, from bpe-openai's copy (offline)."""
    cache = tmp_path_factory.mktemp("tiktoken")
    source = Path(bpe_openai.__file__).parent / "data" / "o200k_base.tiktoken.gz"
    name = hashlib.sha1(O200K_URL.encode()).hexdigest()
    (cache / name).write_bytes(gzip.decompress(source.read_bytes()))
    return cache


@pytest.fixture(params=["bpe", "estimate"])
def tokenizer(
    request: pytest.FixtureRequest, o200k_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """``o200k_base`` loaded offline from bpe-openai's copy, or none (the estimate). tiktoken's
    parse of the file takes seconds, so the first ``bpe`` test's proxy loads it from the cache
    directory and the later ones find that encoding in tiktoken's registry, as a process's
    second load does. The encoding tiktoken keeps per process is let go after each test, so
    that other tests see the machine's own (none, offline)."""
    if request.param == "estimate":
        yield ""
        return
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(o200k_cache))
    if "o200k_base" in _KEPT:
        with tiktoken.registry._lock:
            tiktoken.registry.ENCODINGS["o200k_base"] = _KEPT["o200k_base"]
    yield "o200k_base"
    with tiktoken.registry._lock:
        loaded = tiktoken.registry.ENCODINGS.pop("o200k_base", None)
    if loaded is not None:
        _KEPT["o200k_base"] = loaded


def strict(
    tmp_path: Path, db_dsn: str, fake: FakeUpstream, tokenizer: str, **kwargs: Any
) -> tuple[StrictProvider, Any]:
    provider = StrictProvider(LIMIT)
    ctx = stack(
        tmp_path,
        db_dsn,
        fake,
        Model(main=provider),
        limit=LIMIT,
        reserved=RESERVED,
        settings={"tokenizer": tokenizer},
        **kwargs,
    )
    return provider, ctx


def _dense(kind: str, chars: int, seed: int) -> str:
    rnd = random.Random(seed)
    if kind == "cjk":
        return "".join(chr(rnd.randrange(0x4E00, 0x9FA5)) for _ in range(chars))
    if kind == "emoji":
        return "".join(rnd.choice("🎉😀🚀👍🏽❤️🔥🦀🐍") for _ in range(chars // 2))
    if kind == "base64":
        return base64.b64encode(rnd.randbytes(chars * 3 // 4)).decode()
    if kind == "digits":
        return "".join(rnd.choice("0123456789") for _ in range(chars))
    if kind == "json":
        rows = [{"id": i, "v": rnd.random(), "ok": i % 2 == 0} for i in range(chars // 30)]
        return json.dumps(rows, separators=(",", ":"))[:chars]
    raise AssertionError(kind)


def _history(kind: str, turns: int, chars: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for t in range(turns):
        out.append({"role": "user", "content": _dense(kind, chars, t)})
        out.append({"role": "assistant", "content": f"noted {t}"})
    out.append({"role": "user", "content": "Summarise what you saw."})
    return out


@pytest.mark.parametrize("kind", ["cjk", "emoji", "base64", "digits", "json"])
def test_dense_text_on_the_first_request(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, tokenizer: str, kind: str
) -> None:
    provider, ctx = strict(tmp_path, db_dsn, fake_upstream, tokenizer)
    with ctx as s:
        agent = Agent(s.client(f"dense-{kind}"), system=None)
        agent.messages = _history(kind, 6, 1600)  # chars/4: ~2400 of the 3500 the prompt may hold
        try:
            agent.step(max_tokens=RESERVED)
        except openai.BadRequestError as exc:
            assert exc.code == "context_length_exceeded"
        assert provider.refused == [], provider.refused


CHINESE = "这是一个测试文本，用于检查分词器的行为。我们需要更多的中文字符来进行测试。"


def test_prose_after_a_session_the_estimate_overcounted(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, tokenizer: str
) -> None:
    # Common Chinese is counted high without a BPE encoder, so the session's ratio falls
    # well under 1; a block of English the estimate does not overcount must still fit.
    provider, ctx = strict(tmp_path, db_dsn, fake_upstream, tokenizer, summarize={"enabled": False})
    with ctx as s:
        agent = Agent(s.client("mixed"), system=None)
        for t in range(4):
            agent.say(f"{t} " + CHINESE * 6, max_tokens=RESERVED)
        agent.messages.append({"role": "user", "content": words(3800, "eng")})
        try:
            agent.step(max_tokens=RESERVED)
        except openai.BadRequestError as exc:
            assert exc.code == "context_length_exceeded"
        assert len(provider.counts) >= 4
        assert provider.refused == [], provider.refused


def _tools(n: int, words_each: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": words(words_each, f"d{i}"),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "The file to act on."},
                        "mode": {"type": "string", "enum": ["read", "write", "append"]},
                    },
                    "required": ["path"],
                },
            },
        }
        for i in range(n)
    ]


def _english(turns: int, size: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for t in range(turns):
        out.append({"role": "user", "content": words(size, f"t{t}")})
        out.append({"role": "assistant", "content": f"noted {t}"})
    out.append({"role": "user", "content": "Go on."})
    return out


def test_a_large_tools_array(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, tokenizer: str
) -> None:
    provider, ctx = strict(tmp_path, db_dsn, fake_upstream, tokenizer)
    with ctx as s:
        agent = Agent(s.client("tools"), system=None)
        agent.messages = _english(6, 300)
        for _ in range(2):
            agent.step(tools=_tools(15, 60))
            agent.messages.append({"role": "user", "content": words(200, "more")})
        assert provider.refused == [], provider.refused


def test_a_large_legacy_functions_array(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, tokenizer: str
) -> None:
    provider, ctx = strict(tmp_path, db_dsn, fake_upstream, tokenizer)
    with ctx as s:
        agent = Agent(s.client("functions"), system=None)
        agent.messages = _english(6, 300)
        agent.step(functions=[t["function"] for t in _tools(15, 60)])
        assert provider.refused == [], provider.refused


def test_a_response_format_schema(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, tokenizer: str
) -> None:
    props = {f"field_{i}": {"type": "string", "description": words(30, f"f{i}")} for i in range(30)}
    fmt = {
        "type": "json_schema",
        "json_schema": {
            "name": "report",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": props,
                "required": sorted(props),
                "additionalProperties": False,
            },
        },
    }
    provider, ctx = strict(tmp_path, db_dsn, fake_upstream, tokenizer)
    with ctx as s:
        agent = Agent(s.client("schema"), system=None)
        agent.messages = _english(6, 400)
        agent.step(response_format=fmt)
        assert provider.refused == [], provider.refused


def test_many_high_detail_images(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, tokenizer: str
) -> None:
    provider, ctx = strict(tmp_path, db_dsn, fake_upstream, tokenizer)
    with ctx as s:
        agent = Agent(s.client("images"), system=None)
        agent.messages = _english(3, 300)
        for k in range(2):
            agent.messages.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": f"screenshot {k}"},
                        {"type": "image_url", "image_url": {"url": png_data_url(768, 2048)}},
                    ],
                }
            )
            agent.messages.append({"role": "assistant", "content": "seen"})
        agent.messages.append({"role": "user", "content": "Compare them."})
        try:
            agent.step()
        except openai.BadRequestError as exc:
            assert exc.code == "context_length_exceeded"
        assert provider.refused == [], provider.refused


@pytest.mark.parametrize("key", ["max_completion_tokens", "max_tokens"])
def test_a_large_reserved_output(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, tokenizer: str, key: str
) -> None:
    provider, ctx = strict(tmp_path, db_dsn, fake_upstream, tokenizer)
    with ctx as s:
        agent = Agent(s.client(f"out-{key}"), system=None)
        agent.messages = _english(6, 300)
        agent.step(**{key: 2500}, n=2)
        assert provider.refused == [], provider.refused


def test_one_message_too_large_is_refused_by_the_proxy(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, tokenizer: str
) -> None:
    provider, ctx = strict(tmp_path, db_dsn, fake_upstream, tokenizer)
    with ctx as s:
        agent = Agent(s.client("huge"), system=None)
        agent.messages = [{"role": "user", "content": CHINESE * 200}]  # over 4000 tokens
        with pytest.raises(openai.BadRequestError) as info:
            agent.step()
        assert info.value.code == "context_length_exceeded"
        assert s.main_bodies() == []
        assert provider.refused == []
        # what the client sent is kept: a retry after shortening it finds its history
        (stored,) = s.query("SELECT message FROM messages WHERE session_id = $1", "huge")
        assert json.loads(stored["message"]) == agent.messages[0]


def test_the_summary_prompt_fits_the_fast_model(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    # The span folded is the session's own JSON, which the estimate counts low; the fast
    # model's prompt is fitted to its window as the guard counts, with the session's ratio.
    main, fast = StrictProvider(80_000), StrictProvider(12_000)
    model = Model(main=main)

    def responder(req: RecordedRequest) -> Reply | Error:
        if req.json.get("model") == FAST and (refused := fast(req)) and fast.refused:
            return refused
        return model(req)

    with stack(
        tmp_path,
        db_dsn,
        fake_upstream,
        limit=80_000,
        reserved=RESERVED,
        fast_limit=12_000,
        settings={"tokenizer": ""},
        summarize={"background": False},
    ) as s:
        fake_upstream.default = responder
        agent = Agent(s.client("fold-json"))
        rnd = random.Random(3)
        for _ in range(40):
            rows = [{"id": i, "v": rnd.random(), "ok": i % 2 == 0} for i in range(60)]
            agent.say(json.dumps(rows, separators=(",", ":")))
        assert s.summaries("fold-json"), "a compaction ran"
        assert fast.refused == [] and main.refused == []


@pytest.mark.parametrize(
    ("model", "limit"),
    [("small-2024-08-06", LIMIT), ("small-mini-1", LIMIT // 2), ("unknown-model", LIMIT * 2)],
    ids=["prefix", "longest-prefix", "default"],
)
def test_the_window_is_the_models_by_longest_prefix(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, model: str, limit: int
) -> None:
    provider = StrictProvider(limit)
    fake_upstream.default = provider
    models = {
        "default": {"contextLimit": LIMIT * 2, "reservedOutput": RESERVED},
        "small": {"contextLimit": LIMIT, "reservedOutput": RESERVED},
        "small-mini": {"contextLimit": LIMIT // 2, "reservedOutput": RESERVED},
    }
    context = {"summarize": {"enabled": False}, "eviction": {"enabled": False}}
    cfg = write_config(tmp_path / "agents.json", fake_upstream.url, models=models, context=context)
    server = ProxyServer(
        Settings(database_url=db_dsn, config=cfg, watch_config=False, tokenizer="")
    ).start()
    try:
        client = openai.OpenAI(
            base_url=server.url,
            api_key="sk-test-client",
            max_retries=0,
            default_headers={"X-Session-Id": f"window-{model}"},
        )
        agent = Agent(client, model=model)
        agent.messages += _english(8, 500)[1:]  # over the two smaller windows, under the default
        agent.step(max_tokens=RESERVED)
        assert provider.refused == [], provider.refused
        resp = httpx.get(
            f"{server.origin}/v1/sessions/window-{model}",
            headers={"authorization": "Bearer sk-test-client"},
            timeout=10,
        )
        assert resp.json()["context_limit"] == limit
    finally:
        server.stop()
