"""``WindowRescan``: a window stored before its agent's patterns changed is redacted again."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from proxy.cascade.redaction import REDACTED, compile_patterns
from proxy.services.chat import _all_new
from proxy.services.rescan import WindowRescan
from proxy.session_id import SessionKey

KEY = SessionKey("t", "s")
CODE = "ZETA-4821-QX"
OLD = compile_patterns(())
NEW = compile_patterns((r"ZETA-\d{4}-[A-Z]{2}",))
WINDOW = (
    {"role": "user", "content": f"use {CODE}"},
    {"role": "assistant", "content": f"I used {CODE}"},
    {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": CODE}]},
)


def test_a_window_is_redacted_again_under_new_patterns_but_the_models_reply() -> None:
    rescan = WindowRescan()
    assert rescan.window(KEY, WINDOW, OLD) == WINDOW
    user, reply, tool = rescan.window(KEY, WINDOW, NEW)
    assert user["content"] == f"use {REDACTED}" and tool["content"][0]["text"] == REDACTED
    assert reply is WINDOW[1]
    # a match is not remembered as clean: the next step redacts it again
    assert rescan.window(KEY, WINDOW, NEW)[0]["content"] == f"use {REDACTED}"


def test_the_rescan_reads_what_ingestion_redacts_in_a_clients_message() -> None:
    """Ingestion redacts a client's message with ``redact_written``: its refusal parts and
    its ``refusal`` field too (a lenient provider takes them in a user's message, which is
    resent every turn). A pass under new patterns reads them as ingestion would."""
    user = {
        "role": "user",
        "content": [{"type": "refusal", "refusal": f"not {CODE}"}],
        "refusal": f"not {CODE}",
    }
    [out] = WindowRescan().window(KEY, (user,), NEW)
    assert out["content"] == [{"type": "refusal", "refusal": f"not {REDACTED}"}]
    assert out["refusal"] == f"not {REDACTED}"


def test_a_clean_window_is_scanned_once_per_change_of_patterns() -> None:
    rescan = WindowRescan()
    clean = (WINDOW[1],)
    assert rescan.window(KEY, clean, NEW) == clean
    later = (*clean, {"role": "user", "content": CODE})  # ingested under NEW: not scanned
    assert rescan.window(KEY, later, NEW) == later
    assert rescan.window(KEY, later, OLD) == later  # OLD finds nothing in it
    assert rescan.window(KEY, later, NEW)[-1]["content"] == REDACTED  # changed back: again


def test_no_patterns_no_scan_and_the_memory_is_bounded() -> None:
    rescan = WindowRescan(max_sessions=1)
    assert rescan.window(KEY, WINDOW, ()) == WINDOW
    rescan.window(SessionKey("t", "a"), (), NEW)
    rescan.window(SessionKey("t", "b"), (), NEW)
    assert len(rescan._scanned) == 1


def test_a_window_this_request_ingested_whole_is_clean_without_a_pass() -> None:
    rescan = WindowRescan()
    window = ({"role": "user", "content": "ingested just now"},)
    assert rescan.window(KEY, window, NEW, fresh=True) == window
    later = (*window, {"role": "user", "content": CODE})  # as a later ingest would redact
    assert rescan.window(KEY, later, NEW) == later  # remembered clean: no second pass


def test_the_window_is_all_new_only_when_every_position_was_stored_by_this_request() -> None:
    def state(head_len: int, appended: int, positions: tuple[int, ...]) -> Any:
        return SimpleNamespace(head_len=head_len, appended=appended, positions=positions)

    assert _all_new(state(5, 5, (0, 1, 2, 3, 4)))  # a new session's first request
    assert _all_new(state(9, 4, (6, 7, 8)))  # a compaction folded the older rows
    assert not _all_new(state(9, 4, (0, 6, 7, 8)))  # an older system message stays
    assert not _all_new(state(9, 0, ()))  # nothing stored now


def test_steps_with_redaction_off_forget_that_the_window_was_clean() -> None:
    """Messages stored while redaction was off are scanned once it is on again, even
    under the patterns the window was found clean under before."""
    rescan = WindowRescan()
    assert rescan.window(KEY, (), NEW) == ()
    stored_off = ({"role": "tool", "tool_call_id": "c1", "content": CODE},)
    assert rescan.window(KEY, stored_off, ()) == stored_off
    assert rescan.window(KEY, stored_off, NEW)[0]["content"] == REDACTED


def test_steps_under_other_patterns_with_a_match_forget_that_the_window_was_clean() -> None:
    """Found clean under NEW, then a step under OLD (which misses CODE and finds a key):
    what OLD's steps stored is scanned when NEW is back."""
    key = "sk-proj-" + "Zq7" * 12
    rescan = WindowRescan()
    assert rescan.window(KEY, (), NEW) == ()
    stored_old = ({"role": "user", "content": key}, {"role": "user", "content": CODE})
    assert rescan.window(KEY, stored_old, OLD)[0]["content"] == REDACTED
    assert rescan.window(KEY, stored_old, NEW)[1]["content"] == REDACTED


def test_a_session_made_again_under_its_old_id_is_scanned_again() -> None:
    """Found clean under NEW, then deleted; a branch made under the same id copies rows its
    source stored under older patterns: another session (its ``created_at``), not clean."""
    rescan = WindowRescan()
    assert rescan.window(KEY, (), NEW, born="2026-12-06T01:00:00+00:00") == ()
    copied = ({"role": "tool", "tool_call_id": "c1", "content": CODE},)
    again = rescan.window(KEY, copied, NEW, born="2026-12-06T01:30:00+00:00")
    assert again[0]["content"] == REDACTED


def test_a_window_with_a_match_is_redacted_again_at_its_matched_positions_only() -> None:
    """A match that never leaves (a system prompt stored before the pattern) would cost a
    pass over the whole window each step: the scan remembers where it matched, and later
    steps redact those messages only (the others were found clean, or ingested since)."""
    rescan = WindowRescan()
    system = {"role": "system", "content": f"deploy key {CODE}"}
    window = (system, {"role": "user", "content": "hi"})
    assert rescan.window(KEY, window, NEW, positions=(0, 1))[0]["content"] == (
        f"deploy key {REDACTED}"
    )
    unscanned = {"role": "user", "content": CODE}  # stands for one found clean at 1
    later = (system, unscanned, {"role": "user", "content": "more"})
    again = rescan.window(KEY, later, NEW, positions=(0, 1, 2))
    assert again[0]["content"] == f"deploy key {REDACTED}"
    assert again[1] is unscanned and again[2] is later[2]
