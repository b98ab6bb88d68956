"""What a compaction through the real proxy folds, stores and reports (issue #4 items 1, 3, 4
and 7).

After a compaction the prompt is the summary plus the messages since the boundary; the folded
span never splits a tool round and goes to the fast model, which is retried and, on failure,
leaves the previous summary in place; summaries are versioned rows, each merging the previous
one, folded into the first user message, condensed by a reflect pass and invalidated only by a
divergence before their boundary; the compaction events carry tokens, duration and version.
The official SDK talks to a real proxy (compaction_stack.Stack) and the test reads the proxy's
durable effects.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.replies import RecordedRequest
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_prompts import (
    SUMMARY_OPEN,
    assert_paired,
    canon,
    first_user_text,
    live_part,
    summary_of,
    tool_round,
)
from tests.integration.api.compaction_stack import (
    MAIN,
    SECTIONS,
    Agent,
    Model,
    briefing,
    compaction_events,
    stack,
    wait_until,
    words,
)

# ----------------------------------------------------------------------------- 1. O(window)


def test_after_a_compaction_the_prompt_is_summary_plus_messages_since_the_boundary(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, Model()) as s:
        agent = Agent(s.client("win"))
        agent.fill()
        (row,) = wait_until(lambda: s.summaries("win"), what="a summary")
        agent.say("and now?")
        last = s.main_bodies()[-1]
        boundary = row["boundary"]
        assert boundary > 1
        # the system message, then only what came after the boundary — nothing older is sent
        assert live_part(last) == canon(agent.messages[:1] + agent.messages[boundary:-1])
        assert summary_of(last) == row["content"]
        assert first_user_text(last).startswith(SUMMARY_OPEN)
        assert all(words(450, f"t{i}")[:40] not in str(last) for i in range(2))


# ----------------------------------------------------------------------------- 3. the span


def test_the_folded_span_never_splits_a_tool_round_and_goes_to_the_fast_model(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model()
    with stack(
        tmp_path, db_dsn, fake_upstream, model, summarize={"background": False, "keepRecent": 2}
    ) as s:
        agent = Agent(s.client("rounds"))
        agent.messages += [
            {"role": "user", "content": "Why does the build fail?"},
            *tool_round(1),
            *tool_round(2),
            *tool_round(3),
        ]
        agent.step()  # one request, already over softFraction
        (row,) = s.summaries("rounds")
        # keepRecent=2 would cut between call_3a and call_3b: the cut moves before the round
        assert row["boundary"] == 8
        assert agent.messages[8]["tool_calls"][0]["id"] == "call_3a"
        (fast,) = s.fast_bodies()
        folded = fast["messages"][-1]["content"]
        assert "src/mod_1a.py" in folded and "call_2b" in folded
        assert "call_3a" not in folded, "the kept round was folded too"
        (main,) = s.main_bodies()
        assert main["model"] == MAIN
        assert live_part(main) == canon(agent.messages[:1] + agent.messages[8:-1])
        assert_paired(main["messages"])


def test_a_failing_fast_model_is_retried_then_reported_and_the_previous_summary_kept(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model()
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"background": False}) as s:
        agent = Agent(s.client("fail"))
        agent.fill()
        (v1,) = s.summaries("fail")
        for i in range(2):
            agent.say(words(450, f"u{i}"))
        assert len(model.fast_times) == 1
        model.fast_failures = 3
        assert agent.say(words(450, "cross-again")) == "ok", "the request itself must succeed"
        assert len(model.fast_times) == 4, "one success, then exactly three attempts"
        assert s.summaries("fail") == [v1], "the previous state is intact"
        last = s.main_bodies()[-1]
        assert summary_of(last) == v1["content"]
        assert live_part(last) == canon(agent.messages[:1] + agent.messages[v1["boundary"] : -1])
        failed = compaction_events(s, "fail")[-1]
        assert failed["name"] == "context.compaction.failed"
        assert failed["attempts"] == 3 and "500" in failed["error"]
        agent.say("next")  # inside the failure's backoff: no summary call
        assert len(model.fast_times) == 4
        s.query("UPDATE sessions SET compaction_expires = now() WHERE id = $1", "fail")
        agent.say("next")  # the backoff over, the fast model works again: the step compacts
        assert [r["version"] for r in s.summaries("fail")] == [1, 2]


# ----------------------------------------------------------------------------- 4. the rows


def test_summaries_are_versioned_rows_and_each_merges_the_previous_one(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    def brief(req: RecordedRequest) -> str:
        return briefing(objective=f"objective v{len(model.fast_times)}")

    model = Model(brief=brief)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"background": False}) as s:
        agent = Agent(s.client("versions"))
        for i in range(9):
            agent.say(words(450, f"t{i}"))
        v1, v2 = s.summaries("versions")
        assert (v1["version"], v2["version"]) == (1, 2)
        assert v1["boundary"] < v2["boundary"]
        assert "objective v1" in v1["content"] and "objective v2" in v2["content"]
        for row in (v1, v2):
            (stored,) = s.query(
                "SELECT hash FROM messages WHERE session_id = $1 AND pos = $2"
                " AND superseded_at IS NULL",
                "versions",
                row["boundary"] - 1,
            )
            assert row["boundary_hash"] == stored["hash"]
        second = s.fast_bodies()[1]["messages"][-1]["content"]
        assert f"<previous_summary>\n{v1['content']}\n</previous_summary>" in second
        # the second span starts where the first ended: nothing is folded twice
        assert words(450, "t0")[:40] not in second
        last = s.main_bodies()[-1]
        assert summary_of(last) == v2["content"]
        for row in s.summaries("versions"):
            assert [h for h in SECTIONS if h in row["content"]] == list(SECTIONS)


@pytest.mark.parametrize("system", ["You are a coding agent.", None])
def test_the_summary_is_folded_into_the_first_user_message_never_a_system_message(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream, system: str | None
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, Model(), summarize={"background": False}) as s:
        agent = Agent(s.client("fold"), system=system)
        for i in range(6):
            agent.say(words(450, f"t{i}"))
        last = s.main_bodies()[-1]
        roles = [m["role"] for m in last["messages"]]
        assert roles.count("system") == (1 if system else 0)
        if system:
            assert last["messages"][0] == {"role": "system", "content": system}
        first_user = roles.index("user")
        assert first_user == (1 if system else 0)
        assert first_user_text(last).startswith(SUMMARY_OPEN)
        assert sum(SUMMARY_OPEN in str(m.get("content")) for m in last["messages"]) == 1


def test_a_reflect_pass_condenses_a_summary_over_reflect_tokens(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    long_files = "\n".join(f"- `src/pkg/module_{i:03d}.py` is done" for i in range(120))
    short = briefing("- `src/pkg/module_119.py` is done", objective="condensed")

    def brief(req: RecordedRequest) -> str:
        system = req.json["messages"][0]["content"]
        return short if "grown too long" in system else briefing(long_files)

    model = Model(brief=brief)
    with stack(
        tmp_path,
        db_dsn,
        fake_upstream,
        model,
        summarize={"background": False, "reflectTokens": 300},
    ) as s:
        agent = Agent(s.client("reflect"))
        agent.fill()
        first, second = s.fast_bodies()
        assert "grown too long" not in first["messages"][0]["content"]
        assert "grown too long" in second["messages"][0]["content"]
        assert "src/pkg/module_000.py" in second["messages"][1]["content"]
        (row,) = s.summaries("reflect")
        assert row["content"] == short
        assert summary_of(s.main_bodies()[-1]) == short


def test_a_history_diverging_before_the_boundary_invalidates_the_summary(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model(fast_delay=0.3)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"hardFraction": 0.95}) as s:
        agent = Agent(s.client("diverge"))
        agent.fill()
        (v1,) = wait_until(lambda: s.summaries("diverge"), what="the summary")
        agent.say("still fine")
        assert summary_of(s.main_bodies()[-1]) == v1["content"]
        agent.messages[1] = {"role": "user", "content": "edited task: " + words(440, "e")}
        agent.say("go on")
        last = s.main_bodies()[-1]
        assert summary_of(last) is None, "a stale summary reached the model"
        assert live_part(last) == canon(agent.messages[:-1])
        (row,) = s.summaries("diverge")[:1]
        assert row["invalidated_at"] is not None
        # the replacement is built from the edited history
        wait_until(lambda: len(s.summaries("diverge")) == 2, what="a fresh summary")
        assert "edited task" in s.fast_bodies()[-1]["messages"][-1]["content"]


def test_a_history_diverging_after_the_boundary_keeps_the_summary(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, Model(), summarize={"background": False}) as s:
        agent = Agent(s.client("regen"))
        agent.fill()
        (v1,) = s.summaries("regen")
        agent.messages[-1] = {"role": "assistant", "content": "a regenerated answer"}
        agent.say("continue")
        last = s.main_bodies()[-1]
        assert summary_of(last) == v1["content"]
        assert live_part(last) == canon(agent.messages[:1] + agent.messages[v1["boundary"] : -1])
        assert s.summaries("regen")[0]["invalidated_at"] is None


def test_a_summary_is_discarded_when_the_history_changes_while_it_is_written(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model(fast_delay=1.0)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"hardFraction": 0.95}) as s:
        agent = Agent(s.client("race"))
        agent.fill()
        wait_until(lambda: model.fast_times, what="the compaction to start")
        agent.messages[1] = {"role": "user", "content": "edited while summarising"}
        agent.say("go on")
        events = wait_until(
            lambda: [
                e for e in compaction_events(s, "race") if e["name"] != "context.compaction.started"
            ],
            3.0,
            "the outcome",
        )
        assert events[0]["name"] == "context.compaction.failed"
        assert "history changed" in events[0]["error"]
        assert s.summaries("race") == []
        agent.say("and?")
        assert summary_of(s.main_bodies()[-1]) is None


# ----------------------------------------------------------------------------- 7. events


def test_compaction_events_carry_tokens_duration_and_version(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model(fast_delay=0.2)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"background": False}) as s:
        agent = Agent(s.client("events"))
        for i in range(9):
            agent.say(words(450, f"t{i}"))
        model.fast_failures = 3
        for i in range(2):
            agent.say(words(450, f"f{i}"))
        s.settle("events", 11)
        events = s.events("events")
        comp = [e for e in events if e["name"].startswith("context.compaction.")]
        names = [e["name"].rsplit(".", 1)[1] for e in comp]
        assert names[:4] == ["started", "completed", "started", "completed"]
        assert "failed" in names[4:]
        s1, c1, s2, c2 = comp[:4]
        assert s1["summary_version"] is None and s2["summary_version"] == 1
        assert (c1["summary_version"], c2["summary_version"]) == (1, 2)
        for started, completed in ((s1, c1), (s2, c2)):
            assert started["tokens_before"] == completed["tokens_before"]
            assert completed["tokens_after"] < completed["tokens_before"]
            assert completed["duration_ms"] >= 200
            assert completed["folded_messages"] == completed["to_pos"] - completed["from_pos"]
        failed = comp[names.index("failed")]
        assert failed["summary_version"] == 2
        assert failed["tokens_after"] == failed["tokens_before"] > 0
        assert failed["duration_ms"] >= 0 and failed["attempts"] == 3
        # one context.usage per step, and after a compaction it shows the smaller prompt
        usage = [e for e in events if e["name"] == "context.usage"]
        assert len(usage) == 11
        for completed in (c1, c2):
            after = events[events.index(completed) + 1 :]
            following = next(e for e in after if e["name"] == "context.usage")
            assert following["prompt_tokens"] < completed["tokens_before"]


def test_the_thresholds_count_the_summary_in_the_occupancy(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    big = briefing("\n".join(f"- `src/pkg/module_{i:03d}.py` is done" for i in range(120)))
    model = Model(brief=lambda req: big)
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize={"background": False}) as s:
        agent = Agent(s.client("occ"))
        agent.fill()
        assert len(model.fast_times) == 1
        usage = s.events("occ", "context.usage")[-1]
        assert usage["prompt_tokens"] > 1000, "the summary is a large part of the prompt"
        while len(model.fast_times) < 2:
            assert len(agent.messages) < 40, "no second compaction"
            agent.say(words(200, f"n{len(agent.messages)}"))
        s.settle("occ", len(agent.latencies))
        events = s.events("occ")
        names = [e["name"] for e in events]
        first_done = names.index("context.compaction.completed")
        second = names.index("context.compaction.started", first_done)
        between = [e["fraction"] for e in events[first_done:second] if e["name"] == "context.usage"]
        # the second compaction starts on the step after the provider's count crosses 0.5,
        # not once the messages alone (without the summary) do
        assert between and max(between) < 0.5 + 0.08, between
