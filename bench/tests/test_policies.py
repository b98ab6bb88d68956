"""Reference policies, replay metrics and the replay upstream, on synthetic conversations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from starlette.testclient import TestClient

from bench import (
    cost as C,
    policies as P,
    replay_driver as RD,
    replay_policies as RP,
    replay_tables as RT,
    trajectories as T,
)
from bench.replay_upstream import BRIEFING_SECTIONS, ReplayUpstream, build_briefing


def count(msgs):
    return sum(len(str(m.get("content") or "")) // 4 for m in msgs)


def chars4() -> C.Tokenizer:
    return C.Tokenizer(lambda s: [s[i : i + 4] for i in range(0, len(s), 4)], "chars/4")


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def call(cid: str, name: str = "bash") -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}


def assistant(*ids: str, text: str = "") -> dict:
    msg: dict = {"role": "assistant", "content": text}
    if ids:
        msg["tool_calls"] = [call(i) for i in ids]
    return msg


def tool(cid: str, text: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def agent_loop(n: int, size: int = 400) -> list[dict]:
    """A user task then ``n`` rounds of one call and a ``size``-char result each."""
    msgs = [user("task")]
    for i in range(n):
        msgs += [assistant(f"c{i}"), tool(f"c{i}", f"{i}" * size)]
    return msgs


# --- cost -------------------------------------------------------------------------------------


def test_broken_pairings_counts_orphans_and_unanswered_calls() -> None:
    ok = [user("t"), assistant("a", "b"), tool("a", "x"), tool("b", "y"), assistant(text="done")]
    assert C.broken_pairings(ok) == 0
    assert C.broken_pairings([user("t"), tool("zz", "x")]) == 1
    assert C.broken_pairings([user("t"), assistant("a", "b"), tool("a", "x"), assistant()]) == 1
    assert C.broken_pairings([user("t"), assistant("a")]) == 1


def test_shared_prefix_is_token_level_across_message_boundaries() -> None:
    tok = chars4()
    a = [user("aaaabbbb"), user("ccccdddd")]
    b = [user("aaaabbbb"), user("ccccXddd")]
    head = len(tok.tokens(a[0]))
    # second message: "user" "\nccc" "cddd" "d" vs "user" "\nccc" "cXdd" "d"
    assert tok.shared_prefix(a, b) == head + 2
    assert tok.shared_prefix(a, a + [user("z")]) == tok.count(a)
    assert tok.shared_prefix([{"role": "system", "content": "q"}], a) == 0


def test_cache_weighted_cost_prices_the_shared_prefix_at_a_tenth() -> None:
    tok = chars4()
    first = (user("x" * 400),)
    second = (*first, user("y" * 400))
    logs = [C.RequestLog("s", first), C.RequestLog("s", second), C.RequestLog("t", second)]
    m = C.measure(logs, limit=150, tokenizer=tok)
    n1, n2 = tok.count(first), tok.count(second)
    assert m.billed_main == n1 + n2 + n2
    assert m.cache_weighted == round(n1 + (0.1 * n1 + (n2 - n1)) + n2, 1)  # session t starts cold
    assert m.prefix_identical == 1.0
    assert m.over_limit == 2
    assert m.peak_prompt == n2


def test_measure_keeps_fast_model_requests_apart() -> None:
    tok = chars4()
    main = (user("a" * 40),)
    logs = [C.RequestLog("s", main), C.RequestLog("s", (user("b" * 80),), fast=True)]
    m = C.measure(logs, limit=10**6, tokenizer=tok)
    assert (m.requests, m.fast_requests) == (1, 1)
    assert m.billed_fast == tok.count([user("b" * 80)])
    assert m.billed_main == tok.count(main)


def test_prefix_identical_detects_a_rewritten_earlier_message() -> None:
    tok = chars4()
    base = agent_loop(3)
    edited = [*base[:2], tool("c0", "changed"), *base[3:], user("next")]
    logs = [C.RequestLog("s", tuple(base)), C.RequestLog("s", tuple(edited))]
    assert C.measure(logs, limit=10**6, tokenizer=tok).prefix_identical == 0.0


def test_long_text_is_tokenized_in_chunks_without_loss() -> None:
    tok = chars4()
    text = ("line of text\n" * 20_000)[:250_001]
    assert tok.count([user(text)]) == len(C.message_text(user(text))) // 4 + 1


def test_o200k_tokenizer_is_available_offline() -> None:
    tok = C.get_tokenizer()
    assert tok.name == "o200k_base"
    assert tok.count([user("hello world")]) == len(tok.tokens(user("hello world"))) > 2


# --- clearing ---------------------------------------------------------------------------------


def test_clearing_does_nothing_below_the_trigger() -> None:
    history = agent_loop(4, size=40)
    pol = P.ToolResultClearing(count=count, trigger=10**6)
    assert pol(history) == history


def test_clearing_keeps_the_last_three_tool_uses_and_clears_the_rest() -> None:
    history = agent_loop(6)
    pol = P.ToolResultClearing(count=count, trigger=500)
    out = pol(history)
    results = [m["content"] for m in out if m["role"] == "tool"]
    assert results[:3] == [P.CLEARED_PLACEHOLDER] * 3
    assert results[3:] == ["3" * 400, "4" * 400, "5" * 400]
    assert C.broken_pairings(out) == 0


def test_cleared_results_stay_cleared_on_later_steps() -> None:
    history = agent_loop(6)
    pol = P.ToolResultClearing(count=count, trigger=500)
    first = pol(history)
    later = pol([*history, assistant("c6"), tool("c6", "short")])
    assert later[: len(first)] == first  # cache-friendly: the edited prefix is reused
    assert pol.activations == 1


def test_clear_at_least_skips_an_activation_that_reclaims_too_little() -> None:
    history = agent_loop(4)  # one clearable result of 100 tokens
    pol = P.ToolResultClearing(count=count, trigger=200, clear_at_least=5000)
    assert pol(history) == history
    assert pol.activations == 0


def test_make_policy_clearing_triggers_at_half_the_limit() -> None:
    pol = P.make_policy("clearing", limit=32_000, count=count)
    assert isinstance(pol, P.ToolResultClearing)
    assert (pol.trigger, pol.keep, pol.clear_at_least) == (16_000, 3, None)
    assert P.make_policy("clearing-5k", limit=32_000, count=count).clear_at_least == 5000


# --- masking ----------------------------------------------------------------------------------


def test_masking_keeps_the_observations_of_the_last_ten_turns() -> None:
    history = agent_loop(13, size=10)
    out = P.ObservationMasking()(history)
    results = [m["content"] for m in out if m["role"] == "tool"]
    assert results[:3] == ["Old environment output: (1 lines omitted)"] * 3
    assert results[3:] == [str(i) * 10 for i in range(3, 13)]
    assert C.broken_pairings(out) == 0


def test_masking_counts_the_omitted_lines() -> None:
    history = [user("t"), assistant("a"), tool("a", "1\n2\n3"), *agent_loop(10)[1:]]
    out = P.ObservationMasking()(history)
    assert out[2]["content"] == "Old environment output: (3 lines omitted)"
    assert P.ObservationMasking()(history[:5]) == history[:5]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=25),
    parallel=st.lists(st.booleans(), min_size=25, max_size=25),
    policy=st.sampled_from(P.POLICIES),
)
def test_policies_never_break_pairing_or_drop_messages(
    sizes: list[int], parallel: list[bool], policy: str
) -> None:
    history: list[dict] = [user("task")]
    pol = P.make_policy(policy, limit=2000, count=count)
    for i, size in enumerate(sizes):
        ids = [f"c{i}a", f"c{i}b"] if parallel[i] else [f"c{i}"]
        history.append(assistant(*ids))
        history += [tool(cid, "x" * size) for cid in ids]
        out = pol(history)
        assert len(out) == len(history)
        assert C.broken_pairings(out) == 0
        assert [m["role"] for m in out] == [m["role"] for m in history]


# --- replay upstream and reports --------------------------------------------------------------


def test_briefing_has_the_five_sections_and_quotes_paths() -> None:
    text = build_briefing([user("Fix the bug in src/pkg/mod.py please, it crashes on start")])
    assert [ln for ln in text.splitlines() if ln.startswith("## ")] == list(BRIEFING_SECTIONS)
    assert "`src/pkg/mod.py`" in text
    assert build_briefing([user("same")]) == build_briefing([user("same")])


def test_upstream_usage_counts_the_framing_and_the_tools_as_a_provider_does() -> None:
    """The proxy calibrates its estimate on the usage it is told: a usage without the tools
    and the framing taught it to count a prompt low, and the guard let one over the window."""
    tok = chars4()
    up = ReplayUpstream(tokenizer=tok)
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    msgs = [user("hi"), user("there")]
    with TestClient(up.app()) as c:
        body = {"model": "gpt-4o", "messages": msgs}
        bare = c.post("/v1/chat/completions", json=body).json()["usage"]["prompt_tokens"]
        body["tools"] = tools
        full = c.post("/v1/chat/completions", json=body).json()["usage"]["prompt_tokens"]
    assert bare == tok.count(msgs) + 2 * 3 + 3
    assert full == bare + tok.count([{"role": "system", "content": json.dumps(tools)}])


def test_upstream_answers_with_the_recorded_reply_and_streams_it() -> None:
    up = ReplayUpstream(tokenizer=chars4())
    reply = assistant("c9", text="run it")
    up.expect("s1", 4, reply)
    with TestClient(up.app()) as c:
        body = {"model": "gpt-4o", "messages": [user("hi")]}
        r = c.post("/v1/chat/completions", json=body).json()
        assert r["choices"][0]["message"]["tool_calls"][0]["id"] == "c9"
        assert r["choices"][0]["finish_reason"] == "tool_calls"
        assert r["usage"]["prompt_tokens"] == chars4().count([user("hi")]) + 3 + 3
        fast = c.post("/v1/chat/completions", json={**body, "model": "fast-model"}).json()
        assert fast["choices"][0]["message"]["content"].startswith("## Objective")
        stream = {**body, "stream": True, "stream_options": {"include_usage": True}}
        frames = c.post("/v1/chat/completions", json=stream).text.split("\n\n")
    datas = [f.removeprefix("data: ") for f in frames if f.startswith("data: ")]
    assert datas[-1] == "[DONE]"
    chunks = [json.loads(d) for d in datas[:-1]]
    assert chunks[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "bash"
    assert "usage" in chunks[-1]
    logs = up.drain()
    assert [(r.session, r.step, r.fast) for r in logs] == [
        ("s1", 4, False),
        ("s1", None, True),
        ("s1", 4, False),
    ]


def test_pass_through_replay_reproduces_the_offline_raw_metrics() -> None:
    tok = chars4()
    convs = [T.Conversation("a", tuple(agent_loop(5))), T.Conversation("b", tuple(agent_loop(3)))]
    with ReplayUpstream(tokenizer=tok) as up:
        errors = RD.send_steps(convs, base_url=up.url, upstream=up, session_id=str)
        received = up.drain()
    assert errors == 0
    online = C.measure(
        [C.RequestLog(r.session, r.messages) for r in received], limit=500, tokenizer=tok
    )
    offline = C.measure(RP.offline_logs(convs, "raw", 500, count), limit=500, tokenizer=tok)
    assert online == offline
    assert online.requests == 8


def _report_rows() -> list[RP.Row]:
    tok = chars4()
    conv = [T.Conversation("a", tuple(agent_loop(6)))]
    return [
        RP.Row(
            1,
            "f.json",
            pol,
            limit,
            C.measure(RP.offline_logs(conv, pol, limit, count), limit=limit, tokenizer=tok),
        )
        for limit in (1000, 4000)
        for pol in P.POLICIES
    ]


def test_reports_render_a_table() -> None:
    md = RT.render_markdown(_report_rows())
    assert md.count("| clearing |") == 2
    assert "### File 1: `f.json`" in md


def test_reports_render_a_chart(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="charts need the bench extra (make bench-test)")
    png = RT.render_chart(_report_rows(), tmp_path / "c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_proxy_config_sets_limit_fast_model_and_summary_switch() -> None:
    cfg = RP.proxy_config(32_000, "cascade-nosummary", "http://127.0.0.1:1/v1")
    assert cfg["models"]["default"]["contextLimit"] == 32_000
    assert cfg["agents"]["default"]["fastModel"] == RP.FAST_MODEL
    assert cfg["context"]["summarize"]["enabled"] is False
    assert "summarize" not in RP.proxy_config(128_000, "cascade-default", "u")["context"]


def test_proxy_config_reserves_a_share_of_the_limit_when_asked() -> None:
    assert (
        "reservedOutput" not in RP.proxy_config(4_000, "cascade-default", "u")["models"]["default"]
    )
    cfg = RP.proxy_config(4_000, "cascade-default", "u", None, 0.125)
    assert cfg["models"]["default"] == {"contextLimit": 4_000, "reservedOutput": 500}


def test_proxy_config_merges_context_overrides_block_by_block() -> None:
    cfg = RP.proxy_config(
        32_000,
        "cascade-nosummary",
        "u",
        {"eviction": {"atFraction": 0.1}, "summarize": {"softFraction": 0.5}},
    )
    assert cfg["context"]["eviction"] == {"atFraction": 0.1}
    assert cfg["context"]["summarize"] == {"enabled": False, "softFraction": 0.5}


def test_replay_context_option_takes_a_json_object_of_objects() -> None:
    from bench.replay import _parse

    args = _parse(["--context", '{"eviction": {"atFraction": 0.1}}'])
    assert args.context == {"eviction": {"atFraction": 0.1}}
    assert _parse([]).context is None
    for bad in ('{"eviction": 0.1}', "[1]"):
        with pytest.raises(SystemExit):
            _parse(["--context", bad])
