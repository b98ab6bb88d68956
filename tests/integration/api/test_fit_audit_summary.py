"""A summary prompt the fast model refuses as too long is never sent to it again unchanged.

The fast model here is :class:`~tests.integration.api.strict_provider.StrictProvider`: it
counts with a real BPE and answers 400 ``context_length_exceeded`` over its window, which is
smaller than the window the config gives it (the proxy fits the summary prompt to that one).
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

from tests.fakes.replies import RecordedRequest
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import FAST, Agent, Model, compaction_events, stack
from tests.integration.api.strict_provider import StrictProvider, prompt_tokens

SUMMARY_OUTPUT = 2000  # the max_tokens a summary call reserves


class FastWindow:
    """The fast model's real window: ``limit``, or when None, one token short of the first
    summary prompt it is sent (with its reserved output), so exactly that prompt is refused."""

    def __init__(self, model: Model, limit: int | None = None) -> None:
        self.model = model
        self.strict = None if limit is None else StrictProvider(limit)
        self.prompts: list[int] = []

    def __call__(self, req: RecordedRequest) -> Any:
        if req.json.get("model") != FAST:
            return self.model(req)
        self.prompts.append(prompt_tokens(req.json))
        if self.strict is None:
            self.strict = StrictProvider(self.prompts[0] + SUMMARY_OUTPUT - 1)
        refused = len(self.strict.refused)
        answer = self.strict(req)
        return answer if len(self.strict.refused) > refused else self.model(req)


def test_a_refused_summary_prompt_is_cut_and_the_compaction_completes(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, summarize={"background": False}) as s:
        fast = FastWindow(Model())
        fake_upstream.default = fast
        Agent(s.client("cut")).fill()
        assert fast.strict is not None and len(fast.strict.refused) == 1
        assert len(fast.prompts) == 2 and fast.prompts[1] <= fast.prompts[0] // 2 + 50
        assert s.summaries("cut"), "the smaller prompt was summarised"
        assert [e["name"] for e in compaction_events(s, "cut")] == [
            "context.compaction.started",
            "context.compaction.completed",
        ]


def test_a_fast_model_that_refuses_every_prompt_is_never_sent_one_twice(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, summarize={"background": False}) as s:
        fast = FastWindow(Model(), limit=SUMMARY_OUTPUT + 1)  # no prompt fits
        fake_upstream.default = fast
        agent = Agent(s.client("never"))
        agent.fill()
        assert agent.messages[-1]["content"] == "ok", "the request itself succeeds"
        assert fast.prompts and all(b < a for a, b in pairwise(fast.prompts))
        assert not s.summaries("never")
        failed = compaction_events(s, "never")[-1]
        assert failed["name"] == "context.compaction.failed"
        assert failed["reason"] == "summary_failed"
        assert "context_length_exceeded" in failed["error"]
        assert failed["attempts"] == len(fast.prompts) <= 3
