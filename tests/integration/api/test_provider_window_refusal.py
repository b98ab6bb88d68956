"""The provider's own ``context_length_exceeded`` teaches the session its estimate is too low.

The fake provider here counts 1.6 tokens for every one the proxy estimates (a tokenizer
unlike the estimate's) and refuses a prompt over ``LIMIT`` by its count, as OpenAI does. The
guard lets the first request through (it fits by the estimate); the provider's 400 is
relayed as it came; the same history sent again is trimmed below the limit and answered,
where before every retry got the same 400.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import openai
import pytest

from proxy.tokenizers import build_counter
from tests.fakes.replies import RecordedRequest, context_length_exceeded, error, reply
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_prompts import assert_paired
from tests.integration.api.compaction_stack import Model, stack
from tests.integration.api.test_overflow_guard import LIMIT, RESERVED, rounds

DENSER = 1.6


def _strict(req: RecordedRequest) -> Any:
    """OpenAI's refusal of a prompt over ``LIMIT`` real tokens, counted ``DENSER`` than the
    proxy's estimate."""
    real = math.ceil(build_counter()(req.json["messages"]) * DENSER)
    if real > LIMIT:
        return context_length_exceeded(
            f"This model's maximum context length is {LIMIT} tokens. However, your messages "
            f"resulted in {real} tokens. Please reduce the length of the messages."
        )
    return reply("ok")


def _send(client: openai.OpenAI, messages: list[dict[str, Any]], stream: bool) -> str:
    if not stream:
        resp = client.chat.completions.create(model="gpt-fake", messages=messages)
        return str(resp.choices[0].message.content)
    chunks = client.chat.completions.create(model="gpt-fake", messages=messages, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.mark.parametrize("stream", [False, True])
def test_the_same_history_after_the_providers_refusal_is_trimmed_and_answered(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, stream: bool
) -> None:
    model = Model(main=_strict)
    summarize = {"enabled": False}
    with stack(
        tmp_path, db_dsn, fake_upstream, model, limit=LIMIT, reserved=RESERVED, summarize=summarize
    ) as s:
        client = s.client("undercounted")
        messages = [{"role": "system", "content": "You are a coding agent."}, *rounds(6, 200)]
        estimate = build_counter()(messages)
        assert estimate * 1.03 < LIMIT - RESERVED < LIMIT < estimate * DENSER  # the premise

        with pytest.raises(openai.BadRequestError) as info:
            _send(client, messages, stream)
        err = info.value
        assert err.code == "context_length_exceeded" and "resulted in" in str(err.body)
        first = s.main_bodies()
        assert len(first) == 1 and len(first[0]["messages"]) == len(messages)
        assert s.events("undercounted", "context.usage") == []  # nothing a retry duplicates
        (row,) = s.query("SELECT calibration FROM sessions WHERE id = $1", "undercounted")
        assert 1.5 < row["calibration"] <= 2.0

        assert _send(client, messages, stream) == "ok"
        second = s.main_bodies()[-1]
        assert math.ceil(build_counter()(second["messages"]) * DENSER) <= LIMIT
        assert len(second["messages"]) < len(messages)
        assert second["messages"][:2] == messages[:2], "system and task are kept"
        assert_paired(second["messages"])
        (trimmed,) = s.events("undercounted", "context.trimmed")
        assert trimmed["dropped_messages"] > 0


def test_a_refusal_that_gives_no_count_still_gets_the_history_trimmed(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """llama.cpp's wording, without its count fields: the session learns the prompt it sent
    was over the limit, and counts it so next time."""
    refusal = {"error": {"code": 400, "message": "the request exceeds the available context size"}}

    def strict(req: RecordedRequest) -> Any:
        if math.ceil(build_counter()(req.json["messages"]) * 1.3) > LIMIT:
            return error(400, refusal)
        return reply("ok")

    summarize = {"enabled": False}
    with stack(
        tmp_path,
        db_dsn,
        fake_upstream,
        Model(main=strict),
        limit=LIMIT,
        reserved=RESERVED,
        summarize=summarize,
    ) as s:
        client = s.client("llama")
        messages = [{"role": "system", "content": "You are a coding agent."}, *rounds(7, 200)]
        with pytest.raises(openai.BadRequestError):
            _send(client, messages, False)
        assert _send(client, messages, False) == "ok"
        assert len(s.main_bodies()[-1]["messages"]) < len(messages)


def test_an_unrelated_refusal_teaches_nothing(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    bad = {"error": {"message": "Invalid schema for function 'f'", "code": "invalid_schema"}}
    with stack(tmp_path, db_dsn, fake_upstream, Model(), limit=LIMIT, reserved=RESERVED) as s:
        fake_upstream.script(error(400, bad))
        with pytest.raises(openai.BadRequestError):
            _send(s.client("other"), [{"role": "user", "content": "hi"}], False)
        (row,) = s.query("SELECT calibration FROM sessions WHERE id = $1", "other")
        assert row["calibration"] == 1.0
