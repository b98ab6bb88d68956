"""The secret check of a ``global`` fact reads every agent's redaction patterns: a global
fact goes into every agent's prompts, so what any agent redacts is a secret there. It read
the top-level patterns only, and a key an agent's own pattern hides (its ``default`` agent's
too, whose facts are global) could be stored for all of them."""

from __future__ import annotations

from proxy.cascade.memory import sanitize_fact
from proxy.config import parse_config
from proxy.services.memory import patterns_for

CONFIG = parse_config(
    {
        "agents": {
            "default": {"context": {"redaction": {"patterns": ["DEF-[0-9]{4}"]}}},
            "coder": {"context": {"redaction": {"patterns": ["INT-[0-9]{4}"]}}},
            "writer": {},
        },
        "context": {"redaction": {"patterns": ["TOP-[0-9]{4}"]}},
    }
)


def test_a_global_fact_is_checked_with_every_agents_patterns() -> None:
    patterns = patterns_for(CONFIG, "global")
    for text in ("Ticket INT-1234 is open", "Ticket DEF-1234 is open", "Ticket TOP-1234 is open"):
        verdict = sanitize_fact(text, patterns=patterns)
        assert not verdict.ok and verdict.reason and "secret" in verdict.reason, text
    assert sanitize_fact("The build uses uv", patterns=patterns).ok


def test_an_agent_scope_is_checked_with_its_agents_patterns() -> None:
    coder = patterns_for(CONFIG, "agent:coder")
    assert not sanitize_fact("Ticket INT-1234 is open", patterns=coder).ok
    writer = patterns_for(CONFIG, "agent:writer")
    assert sanitize_fact("Ticket INT-1234 is open", patterns=writer).ok
    assert not sanitize_fact("Ticket TOP-1234 is open", patterns=writer).ok


def test_the_default_patterns_count_even_where_an_agent_turns_them_off() -> None:
    """``defaultPatterns: false`` spares an agent's tool output the built-in patterns (code
    the generic ``password=`` one reads as a secret); a fact is no such text, and one holding a
    key would ride in every prompt of the scope."""
    cfg = parse_config(
        {
            "agents": {"default": {}, "coder": {}},
            "context": {"redaction": {"defaultPatterns": False}},
        }
    )
    key = "The deploy key is sk-proj-" + "abcdefghij" * 3
    for scope in ("agent:coder", "global"):
        verdict = sanitize_fact(key, patterns=patterns_for(cfg, scope))
        assert not verdict.ok and verdict.reason and "secret" in verdict.reason, scope
    assert sanitize_fact("The build uses uv", patterns=patterns_for(cfg, "agent:coder")).ok
