"""The identifier ledger: deterministic extraction and merging into the briefing."""

from __future__ import annotations

from proxy.cascade.briefing import parse_briefing, section
from proxy.cascade.ledger import apply_ledger, extract_identifiers, message_identifiers

BRIEF = parse_briefing(
    "## Objective\nFix the build\n## Decisions & Facts\nUse port 8443\n"
    "## Files & State\n(none)\n## Open Tasks\nrun tests\n## Next Step\nedit `proxy/app.py`"
)


def test_extracts_paths_urls_hashes_and_ticked_code() -> None:
    text = (
        "Edit src/proxy/app.py and ./run.sh, see https://example.com/docs/a.html, "
        "then commit 3f9a2b7c1d. Call `load_config` in config/agents.json; README.md too."
    )
    got = extract_identifiers(text)
    assert got == [
        "src/proxy/app.py",
        "./run.sh",
        "https://example.com/docs/a.html",
        "3f9a2b7c1d",
        "load_config",
        "config/agents.json",
        "README.md",
    ]


def test_prose_slashes_numbers_and_words_are_not_identifiers() -> None:
    text = "Use and/or the 1/2 split; deadbeefcafe is a word, 1234567 is a number. Done."
    assert extract_identifiers(text) == []


def test_url_trailing_punctuation_and_no_path_inside_url() -> None:
    assert extract_identifiers("Docs at https://a.io/x/y.md.") == ["https://a.io/x/y.md"]


def test_absolute_and_directory_paths() -> None:
    assert extract_identifiers("in /etc/nginx/nginx.conf and ~/work/ and lib/x/") == [
        "/etc/nginx/nginx.conf",
        "~/work/",
        "lib/x/",
    ]


def test_tool_call_arguments_and_parts_are_read() -> None:
    m = {
        "role": "assistant",
        "content": [{"type": "text", "text": "open a/b.py"}],
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path": "/srv/x.toml"}'},
            }
        ],
    }
    assert message_identifiers(m) == ["a/b.py", "/srv/x.toml"]


def test_a_legacy_function_calls_arguments_are_read_as_a_tool_calls_are() -> None:
    call = {"name": "read", "arguments": '{"path": "/srv/x.toml"}'}
    legacy = {"role": "assistant", "content": None, "function_call": call}
    assert message_identifiers(legacy) == ["/srv/x.toml"]
    result = {"role": "function", "name": "read", "content": "port = 8443"}
    got = apply_ledger(BRIEF, [{"role": "user", "content": "go"}, legacy, result], cap=10)
    assert got.added == 1 and "- `/srv/x.toml`" in section(got.summary, "Files & State")


def test_missing_identifiers_are_appended_newest_first_under_files_state() -> None:
    span = [
        {"role": "user", "content": "look at docs/old.md"},
        {"role": "assistant", "content": "changed proxy/app.py and lib/new.py"},
    ]
    res = apply_ledger(BRIEF, span, cap=50)
    files = section(res.summary, "Files & State")
    assert files == "- `lib/new.py`\n- `docs/old.md`"
    assert (res.kept, res.added, res.dropped) == (1, 2, 0)  # proxy/app.py is in Next Step
    assert section(res.summary, "Open Tasks") == "run tests"
    assert parse_briefing(res.summary) == res.summary  # still exactly the five sections


def test_model_text_under_files_state_is_kept_and_ledger_follows() -> None:
    brief = BRIEF.replace("## Files & State\n(none)", "## Files & State\n- edited the app")
    res = apply_ledger(brief, [{"role": "user", "content": "see a/b.py"}], cap=5)
    assert section(res.summary, "Files & State") == "- edited the app\n- `a/b.py`"


def test_cap_drops_the_oldest() -> None:
    span = [{"role": "user", "content": f"file d{i}/f.py"} for i in range(5)]
    res = apply_ledger(BRIEF, span, cap=2)
    assert section(res.summary, "Files & State") == "- `d4/f.py`\n- `d3/f.py`"
    assert (res.kept, res.added, res.dropped) == (0, 2, 3)


def test_nothing_missing_leaves_the_summary_unchanged() -> None:
    res = apply_ledger(BRIEF, [{"role": "user", "content": "fix proxy/app.py"}], cap=50)
    assert res.summary == BRIEF
    assert (res.kept, res.added, res.dropped) == (1, 0, 0)


def test_deterministic() -> None:
    span = [{"role": "tool", "tool_call_id": "t", "content": "x/y.py z/w.py http://h/p"}]
    assert apply_ledger(BRIEF, span, cap=9) == apply_ledger(BRIEF, span, cap=9)
