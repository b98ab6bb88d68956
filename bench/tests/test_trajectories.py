"""Converters of the recorded transcript formats to OpenAI chat, on tiny synthetic files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import trajectories as T, trajectory_formats
from bench.cost import broken_pairings


def _write(tmp_path: Path, name: str, data: object, *, lines: bool = False) -> Path:
    path = tmp_path / name
    if lines:
        assert isinstance(data, list)
        path.write_text("\n".join(json.dumps(r) for r in data) + "\n", encoding="utf-8")
    else:
        path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _call(cid: str, cmd: str) -> dict:
    args = json.dumps({"command": cmd})
    return {
        "index": 0,
        "id": cid,
        "type": "function",
        "function": {"name": "bash", "arguments": args},
    }


def test_mini_swe_drops_exit_and_extra_keys_and_keeps_pairs(tmp_path: Path) -> None:
    data = {
        "instance_id": "x__y-1",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task"},
            {
                "role": "assistant",
                "content": "look",
                "tool_calls": [_call("c1", "ls")],
                "function_call": None,
                "provider_specific_fields": {},
                "reasoning_content": "think",
                "extra": {"response": {}},
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a.py", "extra": {"raw_output": ""}},
            {"role": "assistant", "content": "done", "tool_calls": [_call("c2", "submit")]},
            {"role": "exit", "content": "patch", "extra": {}},
        ],
    }
    [conv] = T.load(_write(tmp_path, "x.traj.json", data))
    assert [m["role"] for m in conv.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    first = conv.messages[2]
    assert set(first) == {"role", "content", "tool_calls", "reasoning_content"}
    assert first["tool_calls"][0] == {
        "id": "c1",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
    }
    steps = T.steps(conv)
    assert [len(s.prompt) for s in steps] == [2, 4]
    assert steps[1].reply["content"] == "done"
    assert all(broken_pairings(s.prompt) == 0 for s in steps)


def _swe_agent_file(tmp_path: Path) -> Path:
    history = [
        {"role": "system", "content": "commands..."},
        {"role": "user", "content": "demo", "is_demo": True},
        {"role": "user", "content": "ISSUE"},
        {
            "role": "assistant",
            "content": "I'll look\n```\nls -a\n```",
            "thought": "I'll look\n",
            "action": "ls -a\n",
        },
        {"role": "user", "content": "a.py\n(Open file: n/a)\nbash-$"},
        {
            "role": "assistant",
            "content": "edit\n```\nedit 1:1\nx\nend_of_edit\n```",
            "thought": "edit\n",
            "action": "edit 1:1\nx\nend_of_edit\n",
        },
        {"role": "user", "content": "ok\nbash-$"},
        {"role": "assistant", "content": "```\nsubmit\n```", "thought": "", "action": "submit\n"},
    ]
    return _write(tmp_path, "o__r__proj-1.traj", {"history": history, "trajectory": [], "info": {}})


def test_swe_agent_text_actions_become_stable_tool_calls(tmp_path: Path) -> None:
    path = _swe_agent_file(tmp_path)
    [conv] = T.load(path)
    roles = [m["role"] for m in conv.messages]
    assert roles == [
        "system",
        "user",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    call = conv.messages[3]["tool_calls"][0]
    assert call["function"]["name"] == "ls"
    assert json.loads(call["function"]["arguments"]) == {"command": "ls -a\n"}
    assert conv.messages[3]["content"] == "I'll look\n"
    assert conv.messages[4]["tool_call_id"] == call["id"]
    assert conv.messages[5]["tool_calls"][0]["function"]["name"] == "edit"
    assert T.load(path)[0].messages == conv.messages  # ids are stable across loads
    assert all(broken_pairings(s.prompt) == 0 for s in T.steps(conv))
    assert len(T.steps(conv)) == 3


def _action(cid: str, rid: str, name: str = "browser_click", thought: str = "") -> dict:
    return {
        "kind": "ActionEvent",
        "source": "agent",
        "thought": [{"type": "text", "text": thought}] if thought else [],
        "tool_name": name,
        "tool_call_id": cid,
        "tool_call": {"id": cid, "name": name, "arguments": "{}"},
        "llm_response_id": rid,
    }


def _observation(cid: str, obs: dict) -> dict:
    return {"kind": "ObservationEvent", "tool_call_id": cid, "observation": obs}


def test_openhands_groups_parallel_calls_by_response_id(tmp_path: Path) -> None:
    history = [
        _action("a", "r1", thought="go"),
        _action("b", "r1", "browser_get_state"),
        _observation("a", {"kind": "BrowserObservation", "output": "clicked"}),
        _observation("b", {"kind": "BrowserObservation", "output": "<state>"}),
        _action("c", "r2", "finish"),
        _observation("c", {"kind": "FinishObservation", "message": "bye"}),
        {
            "kind": "MessageEvent",
            "source": "user",
            "llm_message": {"role": "user", "content": [{"type": "text", "text": "more?"}]},
        },
        _action("d", "r3", "think"),
    ]
    row = {"instance_id": "safety-x", "instruction": "Do X", "history": history}
    [conv] = T.load(_write(tmp_path, "out.jsonl", [row], lines=True))
    msgs = conv.messages
    assert msgs[0] == {"role": "user", "content": "Do X"}
    assert [c["id"] for c in msgs[1]["tool_calls"]] == ["a", "b"]
    assert msgs[1]["content"] == "go"
    assert [m.get("content") for m in msgs[2:4]] == ["clicked", "<state>"]
    assert msgs[5] == {"role": "tool", "tool_call_id": "c", "content": "bye"}
    assert msgs[6] == {"role": "user", "content": "more?"}
    assert len(T.steps(conv)) == 3
    assert all(broken_pairings(s.prompt) == 0 for s in T.steps(conv))


def _cc(kind: str, content: object, mid: str | None = None, **extra: object) -> dict:
    message: dict = {"role": kind, "content": content}
    if mid:
        message["id"] = mid
    return {"type": kind, "uuid": f"u{id(message)}", "message": message, **extra}


def _claude_file(tmp_path: Path) -> Path:
    records = [
        {"type": "file-history-snapshot"},
        _cc("user", "Work on it"),
        _cc("assistant", [{"type": "thinking", "thinking": "hmm", "signature": "x"}], "m1"),
        _cc(
            "assistant",
            [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}],
            "m1",
        ),
        {"type": "progress", "data": {}},
        _cc("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "a\nb"}]),
        _cc(
            "assistant", [{"type": "tool_use", "id": "t2", "name": "Read", "input": {"p": 1}}], "m1"
        ),
        _cc(
            "user",
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": [{"type": "text", "text": "body"}],
                }
            ],
        ),
        _cc("assistant", [{"type": "text", "text": "Done."}], "m2"),
        {"type": "system", "subtype": "compact_boundary", "compactMetadata": {"preTokens": 9}},
        _cc("user", "Summary of before", isCompactSummary=True),
        _cc("user", "continue"),
        _cc("assistant", [{"type": "text", "text": "Resuming"}], "m3"),
    ]
    return _write(tmp_path, "o__r__sess.jsonl", records, lines=True)


def test_claude_code_merges_blocks_by_message_id_and_skips_compaction(tmp_path: Path) -> None:
    [conv] = T.load(_claude_file(tmp_path))
    msgs = conv.messages
    assert [m["role"] for m in msgs] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert [c["id"] for c in msgs[1]["tool_calls"]] == ["t1", "t2"]
    assert msgs[1]["reasoning_content"] == "hmm"
    assert json.loads(msgs[1]["tool_calls"][0]["function"]["arguments"]) == {"command": "ls"}
    assert msgs[3]["content"] == "body"
    assert msgs[5]["content"] == "continue"  # the injected summary is not part of the baseline
    assert len(T.steps(conv)) == 3
    assert all(broken_pairings(s.prompt) == 0 for s in T.steps(conv))


def test_claude_code_can_restart_at_the_real_compaction(tmp_path: Path) -> None:
    [conv] = trajectory_formats.load_claude_code(_claude_file(tmp_path), restart_at_compaction=True)
    assert [m["content"] for m in conv.messages] == ["Summary of before", "continue", "Resuming"]


def test_tau_bench_runs_are_separate_conversations(tmp_path: Path) -> None:
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "get_user_details", "arguments": "{}"},
    }
    traj = [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "name": "get_user_details", "content": "{}"},
        {"role": "assistant", "content": "done"},
    ]
    runs = [{"task_id": 0, "trial": t, "reward": 1, "info": {}, "traj": traj} for t in (0, 1)]
    convs = T.load(_write(tmp_path, "air.json", runs))
    assert [c.id for c in convs] == ["task0-trial0", "task0-trial1"]
    steps = T.steps(_write(tmp_path, "air2.json", runs))
    assert [(s.conversation, s.index) for s in steps] == [
        ("task0-trial0", 0),
        ("task0-trial0", 1),
        ("task0-trial1", 0),
        ("task0-trial1", 1),
    ]


def test_resolve_by_number_and_fragment() -> None:
    assert T.resolve(6).name.startswith("marot__spotter__4d5611e5")
    assert T.resolve("tau-bench").number == 8
    assert [f.number for f in T.FILES] == list(range(1, 9))
    with pytest.raises(KeyError):
        T.resolve("marot")  # ambiguous


@pytest.mark.skipif(not T.FILES[2].path.exists(), reason="shared trajectories not present")
def test_smoke_real_swe_agent_file() -> None:
    steps = T.steps(T.FILES[2])
    assert len(steps) == 12
    assert all(broken_pairings(s.prompt) == 0 for s in steps)
    assert steps[-1].reply["tool_calls"][0]["function"]["name"] == "submit"
