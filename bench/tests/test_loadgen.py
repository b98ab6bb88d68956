"""The overhead benchmark's pure helpers: statistics, SSE framing, aggregation, targets."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings, strategies as st

from bench.common import median, percentile, ratio, summarize
from bench.fake_upstream import _http, has_flag, stream_frames
from bench.loadgen_client import split_sse
from bench.loadgen_workload import make_workload
from bench.overhead import _parse
from bench.overhead_report import render_markdown
from bench.overhead_rounds import aggregate, evaluate, round_ratios

floats = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


def test_percentile_interpolates_between_closest_ranks():
    values = [10.0, 1.0, 4.0, 2.0]  # sorted: 1 2 4 10
    assert percentile(values, 50) == 3.0
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 10.0
    assert math.isclose(percentile(values, 90), 4.0 + 0.7 * 6.0)


def test_percentile_of_empty_sample_is_nan_and_bad_q_raises():
    assert math.isnan(percentile([], 50))
    try:
        percentile([1.0], 101)
    except ValueError:
        pass
    else:
        raise AssertionError("q > 100 must raise")


@settings(max_examples=60, deadline=None)
@given(st.lists(floats, min_size=1, max_size=40), st.floats(0, 100), st.floats(0, 100))
def test_percentile_is_monotone_and_bounded(values, q1, q2):
    low, high = sorted((q1, q2))
    assert min(values) <= percentile(values, low) <= percentile(values, high) <= max(values)


def test_median_ignores_rounds_without_a_sample():
    assert median([3.0, math.nan, 1.0, 2.0]) == 2.0
    assert math.isnan(median([math.nan]))


def test_summarize_reports_tail_and_count():
    stats = summarize([float(v) for v in range(1, 101)])
    assert stats["n"] == 100
    assert stats["p50"] == 50.5
    assert math.isclose(stats["p99"], 99.01)
    assert stats["max"] == 100.0
    assert math.isnan(summarize([])["p99"])


def test_ratio_is_unknown_without_a_positive_denominator():
    assert ratio(30.0, 3.0) == 10.0
    assert math.isnan(ratio(1.0, 0.0))
    assert math.isnan(ratio(math.nan, 2.0))
    assert math.isnan(ratio(2.0, math.nan))


def test_split_sse_keeps_partial_frame_for_next_read():
    frames, rest = split_sse(b"data: a\n\ndata: b\r\n\r\ndata: c")
    assert frames == [b"data: a", b"data: b"]
    assert rest == b"data: c"
    frames, rest = split_sse(rest + b"\n\n")
    assert frames == [b"data: c"] and rest == b""


def test_fake_upstream_flags_ignore_escaped_keys_and_usage_frame_only_on_request():
    assert has_flag(b'{"stream" : true}', b"stream", b"true")
    assert not has_flag(b'{"m":"say \\"stream\\": true"}', b"stream", b"true")
    assert not has_flag(b'{"stream":false}', b"stream", b"true")
    plain = stream_frames(b'{"stream":true}', "c1", 50)
    with_usage = stream_frames(b'{"stream":true,"stream_options":{"include_usage":true}}', "c1", 50)
    assert len(plain) == 1 + 50 + 1 + 1  # role, content chunks, finish, [DONE]
    assert len(with_usage) == len(plain) + 1
    assert json.loads(with_usage[-2][6:])["usage"]["completion_tokens"] == 50


def test_fake_upstream_answers_through_httptools():
    """uvicorn's httptools protocol, the one the proxy itself serves with."""
    assert _http() == "httptools"


def test_large_workload_is_a_40_message_200kb_agent_request_on_average():
    work = make_workload("large")
    reply = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c9", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
        ],
    }
    messages, sizes, lengths = list(work.base), [], []
    for _ in range(work.turns_per_session):
        sizes.append(len(work.body(messages)))
        lengths.append(len(messages))
        messages += work.next_turn(reply)
    assert sum(lengths) / len(lengths) == 40
    assert 180_000 < sum(sizes) / len(sizes) < 230_000
    assert messages[-1] == {"role": "tool", "tool_call_id": "c9", "content": work.tool_result}


def _session_bodies(work, turns, call_ids):
    """The bodies one session sends over ``turns`` turns, the provider answering each with a
    tool call whose id comes from ``call_ids`` (the fake upstream numbers them)."""
    messages, bodies = list(work.base), []
    for _ in range(turns):
        bodies.append(work.body(messages))
        reply = {
            "role": "assistant",
            "content": None if work.scenario == "large" else "done",
            "tool_calls": [
                {
                    "id": next(call_ids),
                    "type": "function",
                    "function": {"name": "read_file", "arguments": "{}"},
                }
            ]
            if work.scenario == "large"
            else None,
        }
        if reply["tool_calls"] is None:
            del reply["tool_calls"]
        messages += work.next_turn(reply)
    return bodies, messages


def _canonical(msg):
    return json.dumps(msg, sort_keys=True)


def test_distinct_sessions_share_no_message_and_keep_their_size():
    """Every message one session's generator writes differs from every other session's (so no
    chain hash or content-keyed cache recurs across sessions; the provider's text answers may
    repeat, the fake's do), and the bodies' sizes stay
    within 1% of the one-conversation workload's."""
    for scenario in ("large", "tiny"):
        template = make_workload(scenario)
        ids = iter(f"call_{n:08d}" for n in range(10_000))
        same_bodies, _ = _session_bodies(template, template.turns_per_session, ids)
        seen: dict[str, str] = {}
        replies = [{"role": "assistant", "content": "done"}]
        for session in ("lgab12cd-w0-s0", "lgab12cd-w0-s1", "lgab12cd-w1-s0", "x-w10-s0"):
            work = template.distinct(session)
            bodies, messages = _session_bodies(work, work.turns_per_session, ids)
            for msg in messages:
                if msg in replies:
                    continue  # the provider's answer: the fake sends the same text to all
                key = _canonical(msg)
                assert seen.setdefault(key, session) == session, (scenario, msg)
            for got, same in zip(bodies, same_bodies, strict=True):
                assert abs(len(got) - len(same)) / len(same) < 0.01
            assert [m["role"] for m in messages] == [
                m["role"] for m in _session_bodies(template, template.turns_per_session, ids)[1]
            ]
        # the template itself is left as it was: the same mode still sends one conversation
        assert template.base == make_workload(scenario).base


def test_distinct_session_keeps_tool_call_pairs_and_large_request_sizes():
    work = make_workload("large").distinct("cascade-0-large_c8-w7-s12")
    calls = [c["id"] for m in work.base for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in work.base if m["role"] == "tool"]
    assert calls == answered and len(set(calls)) == 17
    bodies, _ = _session_bodies(work, work.turns_per_session, iter(map(str, range(99))))
    assert 180_000 < sum(map(len, bodies)) / len(bodies) < 230_000


def test_overhead_passes_conversations_and_scenarios_through():
    args = _parse(["--targets", "cascade", "--scenarios", "large_c8"])
    assert args.conversations == "distinct" and args.scenario_keys == ["large_c8"]
    assert _parse(["--conversations", "same"]).conversations == "same"


def _window(target, key, rnd, rps, p50):
    return {
        "target": target,
        "scenario_key": key,
        "round": rnd,
        "rps": rps,
        "latency_ms": {"p50": p50, "p99": p50 * 2},
        "errors": {},
    }


def test_aggregate_subtracts_direct_of_the_same_round_then_takes_the_median():
    windows = [
        _window("direct", "tiny_c1", 0, 1000, 1.0),
        _window("direct", "tiny_c1", 1, 900, 5.0),
        _window("direct", "tiny_c1", 2, 950, 2.0),
        _window("floor", "tiny_c1", 0, 400, 2.0),
        _window("floor", "tiny_c1", 1, 300, 7.0),
        _window("floor", "tiny_c1", 2, 500, 9.0),
    ]
    row = aggregate(windows)["floor"]["tiny_c1"]
    assert row["rps"] == 400
    assert row["added_p50"] == 2.0  # per round: 1, 2, 7 -> median 2 (not 7 - 2 = 5)
    assert row["rounds"] == 3


def test_evaluate_marks_targets_unknown_when_litellm_is_missing():
    windows = [
        _window(t, k, 0, rps, p50)
        for t, rps, p50 in (("direct", 5000, 0.2), ("floor", 500, 1.2), ("cascade", 450, 2.0))
        for k in ("tiny_c1", "tiny_c32")
    ]
    results = {t["target"]: t for t in evaluate(aggregate(windows))}
    assert results["added p50 at c=1"]["met"] is True  # 1.8 <= 3 * 1.0
    assert results["RPS at c=32"]["met"] is None
    assert results["RPS at c=32 against the floor"]["met"] is False  # 450 < 500


def test_evaluate_holds_cascade_to_issue_19s_bars():
    """Issue 19's bars: >= the floor and 6x LiteLLM at c=32, >= 0.8x the floor and 5x
    LiteLLM on the large request, added p50 <= 3x the floor's, TTFC p99 <= floor's + 10 ms."""
    windows = [
        _window(t, k, 0, rps, p50)
        for k, table in (
            ("tiny_c1", (("direct", 5000, 0.2), ("floor", 500, 1.2), ("cascade", 450, 3.1))),
            ("tiny_c32", (("floor", 500, 1.0), ("cascade", 520, 1.0), ("litellm", 90, 1.0))),
            ("large_c8", (("floor", 100, 1.0), ("cascade", 79, 1.0), ("litellm", 15, 1.0))),
        )
        for t, rps, p50 in table
    ]
    got = {t["target"]: (t["limit"], t["met"]) for t in evaluate(aggregate(windows))}
    assert got["added p50 at c=1"] == (3.0, True)  # 2.9 added against 1.0: within 3x
    assert got["RPS at c=32 against the floor"] == (1.0, True)  # 1.04x
    assert got["RPS at c=32"] == (6.0, False)  # 5.78x
    assert got["RPS on the large request against the floor"] == (0.8, False)  # 0.79x
    assert got["RPS on the large request"] == (5.0, True)  # 5.27x


def test_round_ratios_pair_the_windows_of_each_round_in_round_order():
    # (target, scenario, round, rps), in the order a run might finish them
    done = [
        ("litellm", "tiny_c32", 1, 80),
        ("cascade", "tiny_c32", 0, 1000),
        ("cascade", "tiny_c32", 1, 900),
        ("litellm", "tiny_c32", 0, 100),
        ("cascade", "large_c8", 0, 400),  # another scenario
        ("floor", "tiny_c32", 0, 50),  # another target
        ("cascade", "tiny_c32", 2, 950),
    ]  # LiteLLM's window of round 2 failed
    windows = [_window(name, key, run, rps, 1.0) for name, key, run, rps in done]
    got = round_ratios(windows, "tiny_c32")
    assert got[:2] == [10.0, 11.25] and math.isnan(got[2])
    assert round_ratios(windows, "stream_c8") == []


def test_the_overhead_report_shows_each_rounds_ratio():
    windows = [
        _window(t, "tiny_c32", r, rps, 1.0)
        for r, (c, lt) in enumerate(((990, 100), (1100, 100)))
        for t, rps in (("cascade", c), ("litellm", lt))
    ]
    rows = aggregate(windows)
    result = {
        "meta": {"targets": ["cascade", "litellm"], "command": "python -m bench.overhead",
                 "when": "now", "machine": "box", "python": "3.11", "rounds": 2, "window_s": 3,
                 "warmup_s": 0.5, "chunk_delay_ms": 2.0, "floor": "floor",
                 "cascade_pool": 10, "load_average_at_start": [0.1], "load_average_at_end": [0.2],
                 "scenarios": {"tiny_c32": {"scenario": "tiny", "concurrency": 32}}},
        "unavailable": {}, "targets": evaluate(rows), "rows": rows, "resources": {},
        "round_ratios": {"tiny_c32": round_ratios(windows, "tiny_c32"), "large_c8": []},
    }  # fmt: skip
    text = render_markdown(result)
    assert (
        "in each round (the targets take the ratio of the medians): tiny request, c=32: "
        "9.90, 11.00." in text
    )
    assert "Cascade runs with `CASCADE_POOL_MAX_SIZE=10`." in text
