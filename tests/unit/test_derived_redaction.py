"""What the proxy derives from the store is redacted with the agent's patterns in force: the
prompt's summary and stage answers (``assemble``), the retrieval query and the background
embedder's texts, each agent by its own patterns (the end-to-end tests are
tests/integration/api/test_secrets_written.py)."""

from __future__ import annotations

from proxy.cascade.pipeline import StepInput, _hidden, assemble
from proxy.cascade.redaction import REDACTED, patterns_of
from proxy.cascade.retrieval import QUERY_CHARS, retrieval_query
from proxy.cascade.types import Budget
from proxy.config import parse_config
from proxy.config_context import ContextConfig
from proxy.services.retrieval import _text
from proxy.store.embeddings import Claimed
from tests.unit.cascade.summary_builders import count, system, user

KEY = "sk-proj-" + "Zq7" * 12
CODE = "ACME-1234"
ACME = ContextConfig.model_validate(
    {"eviction": {"enabled": False}, "redaction": {"patterns": ["ACME-[0-9]{4}"]}}
)
OPEN = ContextConfig.model_validate(
    {"eviction": {"enabled": False}, "redaction": {"enabled": False}}
)


def _step(ctx: ContextConfig, window: tuple[dict, ...] = (system("s"), user("u"))) -> StepInput:
    return StepInput(
        window=window,
        system_count=1,
        summary=f"## Files & State\ndeploy reads {CODE} and {KEY}",
        count=count,
        budget=Budget(limit=10_000, reserved_output=0, occupancy=10),
        ctx=ctx,
    )


def test_the_summary_is_folded_in_redacted_with_the_agents_patterns() -> None:
    prompt = str(assemble(_step(ACME)).messages)
    assert CODE not in prompt and KEY not in prompt and f"deploy reads {REDACTED}" in prompt
    assert CODE in str(assemble(_step(OPEN)).messages)  # redaction off: as stored


def test_a_stage_answer_is_redacted_a_text_or_a_json_block() -> None:
    patterns = patterns_of(ACME.redaction)
    assert (
        _hidden(f"<memory>\n- {CODE}\n</memory>", patterns) == f"<memory>\n- {REDACTED}\n</memory>"
    )
    answer = {"block": f"quoted {KEY}", "hits": 1}
    assert _hidden(answer, patterns) == {"block": f"quoted {REDACTED}", "hits": 1}
    assert _hidden({"hits": 0}, patterns) == {"hits": 0}


def test_the_query_is_redacted_before_it_is_cut() -> None:
    """A key straddling the cut would be too short for its pattern once cut."""
    text = "x" * (QUERY_CHARS - 12) + " " + KEY
    query = retrieval_query(_step(ACME, (system("s"), user(text))))
    assert query is not None and KEY[:11] not in query and query.endswith(REDACTED)


def test_the_embedder_redacts_each_message_with_its_sessions_agent_patterns() -> None:
    cfg = parse_config(
        {
            "agents": {
                "open": {"context": {"redaction": {"enabled": False}}},
                "acme": {"context": {"redaction": {"patterns": ["ACME-[0-9]{4}"]}}},
            }
        },
        {},
    )
    said = {"role": "assistant", "content": f"{CODE} {KEY}"}
    assert _text(Claimed(1, said, "acme"), cfg) == f"{REDACTED} {REDACTED}"
    assert _text(Claimed(1, said, "default"), cfg) == f"{CODE} {REDACTED}"
    assert _text(Claimed(1, said, "open"), cfg) == f"{CODE} {KEY}"
    assert _text(Claimed(1, said, "unnamed"), cfg) == f"{CODE} {REDACTED}"  # the default's
