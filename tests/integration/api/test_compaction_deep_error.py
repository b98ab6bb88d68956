"""A fast model whose error body nests past Python's recursion limit fails the summary call
as any error status does: retried, then reported with the status, the turn answered.

Reading the body for its error code (``context_length_exceeded``) raised a RecursionError,
no ValueError, which escaped the attempts and answered the client's turn with a 500."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fakes.replies import RecordedRequest, raw
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import Agent, Model, compaction_events, stack, words

DEPTH = 10_000


class _DeepErrors(Model):
    """A fast model answering every call with a 500 whose body nests ``DEPTH`` levels."""

    def __call__(self, req: RecordedRequest) -> Any:
        if req.json.get("model") not in self.fast:
            return self.main(req)
        self.fast_times.append(0.0)
        body = '{"error": ' + "[" * DEPTH + "]" * DEPTH + "}"
        return raw(body, status=500, headers={"content-type": "application/json"})


def test_a_deep_error_body_from_the_fast_model_is_retried_then_reported(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = _DeepErrors()
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"background": False}) as s:
        agent = Agent(s.client("deep"))
        for i in range(5):
            assert agent.say(words(450, f"u{i}")) == "ok", "the request itself must succeed"
            if model.fast_times:
                break
        assert len(model.fast_times) == 3, "exactly three attempts"
        failed = compaction_events(s, "deep")[-1]
        assert failed["name"] == "context.compaction.failed"
        assert failed["attempts"] == 3 and "500" in failed["error"], failed
