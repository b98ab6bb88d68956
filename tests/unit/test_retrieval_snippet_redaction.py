"""A recalled message is redacted whole before its snippet is cut from it.

The stored text of a reply the model wrote (or of a message stored before a pattern was
added) still holds its secrets; the prompt's ``<related_context>`` block is redacted when
the prompt is assembled, but a snippet cut inside a secret leaves a part no pattern reads
(the first characters of an ``sk-…`` key, of an ``AKIA…`` id), which then went upstream.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.cascade.pipeline import StepInput, assemble, plan_step
from proxy.cascade.redaction import REDACT_LONG_PAST, REDACT_PAST
from proxy.cascade.types import Budget
from proxy.config import Config
from proxy.config_context import ContextConfig
from proxy.embeddings import EMBED_CHARS
from proxy.services import retrieval
from proxy.session_id import SessionKey
from proxy.store.embeddings import Claimed, Found
from tests.unit.cascade.summary_builders import count, system, user

KEY = "sk-proj-" + "Q7wZp3Lk9Xv2Rt5Yb8Nc4Md6Hf1Gj0Sa"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
LEAD = "The deploy used the key "  # the snippet is cut a few characters into the key


class _Embedder:
    model = "fake"

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]


class _Hub:
    def current(self) -> _Embedder:
        return _Embedder()


@pytest.mark.parametrize("secret", [KEY, AWS])
async def test_a_snippet_cut_inside_a_secret_shows_none_of_it(
    monkeypatch: pytest.MonkeyPatch, secret: str
) -> None:
    said = f"{LEAD}{secret} yesterday."
    answer, sent = await _recalled(monkeypatch, said, len(LEAD) + 14)
    assert answer["hits"] == 1
    assert "[REDACTED]" in sent
    assert secret[:12] not in sent, "no part of the secret goes upstream"


@pytest.mark.parametrize("secret", [KEY, AWS])
def test_a_message_cut_inside_a_secret_is_embedded_without_any_of_it(secret: str) -> None:
    """The worker embeds a message's first ``EMBED_CHARS`` characters, redacted: a cut inside
    a secret left its first characters for the embedding provider (a third party)."""
    text = "x " * ((EMBED_CHARS - len(LEAD) - 6) // 2) + LEAD + secret + " yesterday."
    claimed = Claimed(1, {"role": "assistant", "content": text})
    embedded = retrieval._text(claimed, Config.model_validate({}))
    assert len(embedded) <= EMBED_CHARS and "[REDAC" in embedded  # cut after redaction
    assert secret[:6] not in embedded


async def test_a_snippet_brought_on_by_a_redacted_secret_shows_no_part_of_a_later_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A secret redacted before the snippet's cut shortens the text read for it, which
    brings on text from the end of that reading, where a key the reading cut short is a
    part no pattern reads (``redaction.redact_head``)."""
    snippet = 300
    # redacted, the block takes away more than REDACT_PAST characters
    pem = "-----BEGIN PRIVATE KEY-----\n" + "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n" * (
        (REDACT_PAST + 60) // 33
    )
    lead = "key: " + pem + "-----END PRIVATE KEY----- "
    filler = "x" * (snippet + REDACT_PAST - 23 - len(lead)) + " "
    said = lead + filler + KEY + " was used."
    _, sent = await _recalled(monkeypatch, said, snippet)
    assert len(filler) > 1 and "key: [REDACTED] x" in sent
    assert KEY[:12] not in sent, "no part of the secret goes upstream"


async def test_a_token_longer_than_redact_past_is_read_whole_for_its_snippet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A JSON Web Token whose payload runs past ``REDACT_PAST``: cut there, no pattern read
    it, and its first characters went into the snippet (``redaction.LONG_STARTS``)."""
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJ" + "c3ViIjoiMTIzIn0" * 400 + "." + "c2lnbmF0dXJl" * 20
    answer, sent = await _recalled(monkeypatch, "the token " + jwt + " expired", 300)
    assert answer["hits"] == 1 and "the token [REDACTED]" in sent
    assert jwt[:12] not in sent


async def test_a_hit_read_twice_for_its_snippet_shows_no_part_of_a_key_past_its_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Secrets past a PEM block's start redacted more than ``REDACT_LONG_PAST`` characters
    away, so ``redact_head`` read the hit a second time, further: past where the hit's text
    was cut for it (``retrieval._quotable``), which that reading took for the text's end,
    and the key the cut ran through came into the snippet, a part no pattern reads."""
    snippet = 300
    pem = "-----BEGIN PRIVATE KEY-----\n" + "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n" * 600
    lead = "key: " + pem + "-----END PRIVATE KEY-----"
    lead += "".join(f" Bearer {c * 4000}" for c in "ABCDE") + f" Bearer {'F' * 1207} "
    # the key's first 22 characters lie before the cut, 19 past sk-: one fewer than its
    # pattern reads; redacted, what comes before it is 250 characters long
    filler = "x" * (snippet + 1 + REDACT_LONG_PAST + 1 - 22 - 1 - len(lead)) + " "
    said = lead + filler + KEY + " was used."
    _, sent = await _recalled(monkeypatch, said, snippet)
    assert "Bearer [REDACTED] xxx" in sent
    assert KEY[:12] not in sent, "no part of the secret goes upstream"


async def _recalled(
    monkeypatch: pytest.MonkeyPatch, said: str, snippet: int
) -> tuple[dict[str, Any], str]:
    """The retrieval answer for one recalled assistant message and the prompt's last
    message with its block."""
    found = [Found(4, "assistant", None, {"role": "assistant", "content": said}, "summarised", 0.9)]

    async def search(conn: Any, **kw: Any) -> list[Found]:
        return found

    monkeypatch.setattr(retrieval, "embedders_here", _Hub)
    monkeypatch.setattr(retrieval.store, "search_outside_prompt", search)
    ctx = ContextConfig.model_validate({"retrieval": {"enabled": True, "snippetChars": snippet}})
    step = StepInput(
        window=(system("s"), user("which key did the deploy use?")),
        system_count=1,
        summary=None,
        count=count,
        budget=Budget(limit=100_000, reserved_output=0, occupancy=10),
        ctx=ctx,
        answers={},
    )
    need = plan_step(step)["retrieval"]
    answer = await retrieval.related_messages(need, None, SessionKey("t", "s"))
    return answer, assemble(step, answers={"retrieval": answer}).messages[-1]["content"]
