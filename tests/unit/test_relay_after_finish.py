"""What comes after a finish frame the relay holds (``read_tool_output`` offered): a frame that
says nothing more (Azure's content-filter chunk) keeps its place behind it, but one that says
more (text a provider sends after its finish, or after an early usage frame) goes out at its
read, never buffered to the round's end; an error frame that carries usage but no choices is
no usage-only frame to drop; and a usage frame without ``choices`` is read whether or not it
goes out."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from proxy import sse
from proxy.services.relay import ClientStream, RoundOutcome, relay_round
from tests.unit.test_relay import _Stalling, chunks, frame, relay

USAGE = b'data: {"id": "c-1", "choices": [], "usage": {"prompt_tokens": 3, "total_tokens": 4}}\n\n'
MORE = frame({"content": "more"})


def _gated(pieces: Sequence[bytes]) -> _Stalling:
    """A StreamAnswer whose ``[DONE]`` waits until ``go`` is set (the client got ``MORE``)."""
    return _Stalling([*pieces, sse.DONE], after=len(pieces))


@pytest.mark.parametrize(
    "before",
    [[frame({}, "stop")], [USAGE]],
    ids=["after-finish", "after-usage"],
)
async def test_text_after_a_held_frame_goes_out_at_its_read(before: list[bytes]) -> None:
    body = _gated([frame({"role": "assistant", "content": "a"}), *before, MORE])
    got: list[bytes] = []
    async with asyncio.timeout(2):  # held to the end, it never comes: the body waits for it
        async for piece in relay_round(
            body,  # type: ignore[arg-type]
            RoundOutcome(),
            strip_usage=False,
            intercept=True,
            keepalive=5,
        ):
            got.append(piece)
            if MORE in piece:
                body.go.set()
    assert b"".join(got).count(b"data: ") == 4  # nothing lost: what was held went out too
    assert got[-1] == sse.DONE


async def test_a_frame_that_says_nothing_after_the_finish_keeps_its_place() -> None:
    filtered = frame({})  # Azure's content-filter chunk: an empty delta, no finish
    pieces = [frame({"content": "a"}), frame({}, "stop"), filtered, sse.DONE]
    got, out = await relay(pieces, ClientStream(), intercept=True)
    assert b"".join(got) == b"".join(pieces) and out.error is None


async def test_an_error_frame_with_usage_but_no_choices_reaches_the_client() -> None:
    failure = (
        b'data: {"error": {"message": "overloaded", "type": "server_error"}, '
        b'"usage": {"prompt_tokens": 3, "total_tokens": 3}}\n\n'
    )
    out = RoundOutcome()
    body = _gated([frame({"content": "a"}), failure, MORE])
    body.go.set()
    got = [
        p
        async for p in relay_round(
            body,  # type: ignore[arg-type]
            out,
            strip_usage=True,
            intercept=False,
            keepalive=5,
        )
    ]
    assert any("error" in c for c in chunks(got))
    assert out.provider_error == "type 'server_error'"


@pytest.mark.parametrize("asked", [True, False], ids=["asked", "not-asked"])
async def test_a_usage_frame_without_choices_is_read_and_goes_out_untouched_if_asked(
    asked: bool,
) -> None:
    usage = b'data: {"id": "c-1", "usage": {"prompt_tokens": 3, "total_tokens": 4}}\n\n'
    body = _gated([frame({"content": "a"}, "stop"), usage])
    body.go.set()
    out = RoundOutcome()
    got = [
        p
        async for p in relay_round(
            body,  # type: ignore[arg-type]
            out,
            strip_usage=not asked,
            intercept=False,
            keepalive=5,
        )
    ]
    assert (usage in got) is asked  # the provider's bytes, as they came
    assert out.acc.usage == {"prompt_tokens": 3, "total_tokens": 4}  # stored either way
