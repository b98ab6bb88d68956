"""README states names and bounds the code defines elsewhere; these tie the two together, so a
renamed event, a new setting or a changed constant fails here instead of leaving the manual
silently wrong."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
from typing import Any

import pytest

from proxy.aiohttp_stream import READ_AHEAD_BYTES, RECEIVE_BUFFER_BYTES
from proxy.answers import MAX_ANSWER_BYTES, MAX_EMBEDDINGS_BYTES
from proxy.api.deps import API_BODY_LIMIT
from proxy.api.event_cursor import SETTLE_SECONDS
from proxy.api.events import CATCH_UP_SECONDS, SEND_TIMEOUT_SECONDS
from proxy.bus import MAX_QUEUED, PROBE_EVERY, PROBE_TIMEOUT, START_TIMEOUT, WATCH_TTL
from proxy.bus_payloads import MAX_PAYLOAD
from proxy.cascade import types
from proxy.cascade.memory import MAX_FACT_CHARS, MAX_FACTS_PER_SPAN
from proxy.cascade.memory_block import FACTOR_STEP, MEMORY_BUDGET_SHARE, MEMORY_MAX_TOKENS
from proxy.cascade.overflow import GUARD_MARGIN, TRIM_TARGET
from proxy.cascade.pipeline import EARLIER_RESULTS
from proxy.cascade.pointers import MAX_OCCURRENCES
from proxy.cascade.pressure import BACKOFF_FIRST_SECONDS, BACKOFF_MAX_SECONDS
from proxy.cascade.summary import MIN_SPAN_RATIO
from proxy.cascade.truncation import HEAD_SHARE
from proxy.cli_api import CONNECT_SECONDS, WAIT_SECONDS
from proxy.config import AgentConfig, EmbeddingConfig, ModelConfig, ProviderConfig
from proxy.config_context import ContextConfig, SummarizeConfig
from proxy.config_watch import RECHECK_SECONDS
from proxy.metrics import Metrics
from proxy.middleware import PATH_SHOWN
from proxy.provider_errors import POOL_WAIT_SECONDS
from proxy.server import UNREAD_SECONDS
from proxy.services.chaincache import ChainCache
from proxy.services.compaction_job import _RETRY_AFTER_WAIT
from proxy.services.deltas import FINAL_WAIT, FLUSH_INTERVAL
from proxy.services.incoming import GUESS_NEW_SESSION_MAX
from proxy.services.ingestmemo import IngestMemo
from proxy.services.resent import ResentBodies
from proxy.services.retrieval import RACE_SLACK, RESCAN_WINDOWS
from proxy.session_id import SESSION_ID_RE
from proxy.settings import Settings
from proxy.settings_names import OTHER_VARIABLES
from proxy.store.embeddings import CLAIM_WINDOW
from proxy.store.leases import POLL_MAX_SECONDS
from proxy.store.migrations import LOCK_RETRY_SECONDS, LOCK_WAIT_SECONDS
from proxy.store.readiness import CHECK_TIMEOUT, REUSE_SECONDS
from proxy.tokenizers import CACHE_MAX_CHARS, CACHE_MIN_CHARS, LOAD_WAIT_SECONDS
from proxy.tracing import STOP_SECONDS
from proxy.warmup import POOL_WARM_MAX
from tests.unit import design
from tests.unit.readme import LINES, README, ROOT, TEXT, snake as _snake
from tests.unit.starts import SERVE, run_start


def _ceiling(setting: str, model: Any = Settings) -> float:
    """The upper bound (``le``) a field of ``model`` (``Settings``) validates against."""
    bounds = [m.le for m in model.model_fields[setting].metadata if hasattr(m, "le")]
    assert len(bounds) == 1
    return float(bounds[0])


def _default(cls: type, name: str) -> int:
    """The default of keyword ``name`` of ``cls``'s constructor."""
    default = inspect.signature(cls).parameters[name].default
    assert isinstance(default, int)
    return default


EVENTS = sorted(
    value
    for value in vars(types).values()
    if isinstance(value, str) and re.fullmatch(r"(context|session|memory|config)\.[a-z_.]+", value)
)


def test_every_event_the_proxy_sends_is_named_in_readme() -> None:
    assert "context.usage" in EVENTS and "config.rejected" in EVENTS
    assert [name for name in EVENTS if f"`{name}`" not in README] == []


def test_every_setting_is_a_row_of_the_environment_table() -> None:
    rows = "\n".join(line for line in LINES if line.startswith("| `"))
    missing = []
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        variable = alias if isinstance(alias, str) else f"CASCADE_{name.upper()}"
        if f"`{variable}`" not in rows:
            missing.append(variable)
    assert missing == []


_ID_CHARS = SESSION_ID_RE.pattern.removeprefix(r"(?!\.\.?\Z)")
"""The characters and length of a session id, without the lookahead refusing ``.`` and ``..``."""


@pytest.mark.parametrize(
    "phrase",
    [
        f"among the last {EARLIER_RESULTS} the client resent",
        f"among each line's last {MAX_OCCURRENCES} places",
        f"keep a {round(HEAD_SHARE * 100)}% head and {round((1 - HEAD_SHARE) * 100)}% tail",
        f"down to {round(TRIM_TARGET * 100)}% of the budget",
        f"real/estimated ratio plus {round((GUARD_MARGIN - 1) * 100)}%",
        f"over {MAX_FACT_CHARS} characters",
        f"the first {MAX_FACTS_PER_SPAN} that pass are kept",
        f"cut at about {MEMORY_MAX_TOKENS} tokens",
        f"when the client sends at most {GUESS_NEW_SESSION_MAX} messages",
        f"refreshed every {WATCH_TTL / 3:g} s; a dead replica's rows expire after {WATCH_TTL:g} s",
        f"re-read the events table every {CATCH_UP_SECONDS:g} s",
        f"as final only {SETTLE_SECONDS:g} s after it was written",
        f"In its first {SETTLE_SECONDS:g} s a stream reads the table",
        f"that waits {SEND_TIMEOUT_SECONDS:g} s to go out",
        f"holds at most {MAX_QUEUED} unsent events on the server",
        f"at most one per {FLUSH_INTERVAL * 1000:g} ms",
        f"is waited for (at most {FINAL_WAIT:g} s)",
        f"the bound stays {POLL_MAX_SECONDS:g} s (the longest pause between tries)",
        "a killed replica frees its sessions within {:g} s.".format(
            Settings.model_fields["lease_ttl_seconds"].default + POLL_MAX_SECONDS
        ),
        f"so the bound is TTL + {POLL_MAX_SECONDS:g} s, "
        f"{Settings.model_fields['lease_ttl_seconds'].default + POLL_MAX_SECONDS:g} s by default "
        f"and at most {_ceiling('lease_ttl_seconds') + POLL_MAX_SECONDS:g} s",
        f"An answer's size is capped at {MAX_ANSWER_BYTES >> 20} MiB",
        f"and `/v1/embeddings` at {MAX_EMBEDDINGS_BYTES >> 20} MiB",
        f"up to {READ_AHEAD_BYTES >> 10} KiB ahead of a slow client",
        f"receive buffer is fixed at {RECEIVE_BUFFER_BYTES >> 10} KiB",
        f"the session and memory APIs' bodies are capped at {API_BODY_LIMIT >> 10} KiB",
        f"At a stop the proxy waits up to {STOP_SECONDS:g} s for the last spans",
        f"It waits up to {WAIT_SECONDS:g} s for the whole answer",
        f"A connection not made within {CONNECT_SECONDS:g} s (a firewall dropping it)",
        f"repeats its `LISTEN` every {PROBE_EVERY:g} s",
        f"and must answer within {PROBE_TIMEOUT:g} s",
        f"is read again every {RECHECK_SECONDS:g} s",
        f"**tiktoken's start-up wait** is bounded at {LOAD_WAIT_SECONDS:g} s",
        f"turns 503 when none is free for {CHECK_TIMEOUT:g} s",
        f"its answer stands for {REUSE_SECONDS:g} s from its start",
        f"(~{MAX_PAYLOAD / 1000:g} KB",
        f"up to {_default(ResentBodies, 'max_bytes') >> 20} MB of bodies in all",
        f"holds up to {_default(ChainCache, 'max_chars') // 10**6} million characters",
        f"up to {_default(IngestMemo, 'max_chars') // 10**6} million characters per replica",
        f"or at {round(MEMORY_BUDGET_SHARE * 100)}% of the prompt budget",
        f"rounded up to a power of {FACTOR_STEP:g}",
        f"at most `summarize.ledgerCap` ({SummarizeConfig().ledger_cap})",
        "`CASCADE_MAX_INTERNAL_ROUNDS` ({})".format(
            Settings.model_fields["max_internal_rounds"].default
        ),
        f"past it a request waits (up to {POOL_WAIT_SECONDS:g} s, then 504)",
        f"(DATABASE_LISTEN_URL): no connection within {START_TIMEOUT:g} s",
        f"opens min(pool size, {POOL_WARM_MAX}) connections",
        f"at most {_ceiling('lease_ttl_seconds'):g} (see Capacity)",
        f"the setting's ceiling is {_ceiling('lease_ttl_seconds'):g}",
        f"per interval per replica; at most {_ceiling('embedding_poll_seconds'):g} |",
        f"backoff: {BACKOFF_FIRST_SECONDS:g} s after the first failure in a row",
        f"up to {BACKOFF_MAX_SECONDS / 60:g} minutes, and no shorter than a `Retry-After`",
        f"when that is longer and at most {_RETRY_AFTER_WAIT:g} s",
        f"as many more as the prompt carries, at most {RACE_SLACK}, so",
        f"`maxAttempts` {SummarizeConfig().max_attempts} "
        f"(at most {_ceiling('max_attempts', SummarizeConfig):g})",
        f"retries included (at most {_ceiling('timeout_seconds', SummarizeConfig):g})",
        f"that waits over {LOCK_WAIT_SECONDS:g} s for a table's lock",
        f"tried again {LOCK_RETRY_SECONDS:g} s later",
        f"at most {RESCAN_WINDOWS} claim windows ({RESCAN_WINDOWS * CLAIM_WINDOW:,} ids) that"
        " claim nothing",
        f"texts of {CACHE_MIN_CHARS} characters or more, {CACHE_MAX_CHARS // 10**6}M characters",
        f"the stop cuts either after {UNREAD_SECONDS:g} s of its client reading nothing",
        f"span under {MIN_SPAN_RATIO:g} times the characters of the messages kept after it",
        f"one over {PATH_SHOWN} characters cut there",
        f"Ids must match `{_ID_CHARS}`",
    ],
)
def test_a_bound_readme_states_is_the_constant(phrase: str) -> None:
    assert phrase in README


def _stated_defaults() -> list[tuple[str, str, Any, Any]]:
    """(row, key, README's default, the model's) for each ```key` value`` pair in the default
    column of the configuration table's ``context.<block>`` and ``embedding`` rows."""
    found = []
    for line in LINES:
        row = re.match(r"\| `(context\.(\w+)|embedding)` \| ([^|]+) \|", line)
        if row is None:
            continue
        model = EmbeddingConfig() if row[2] is None else getattr(ContextConfig(), _snake(row[2]))
        for key, value in re.findall(r"`(\w+)` (`[^`]+`|\d+ MiB|[^,;( ]+)", row[3]):
            if value.endswith(" MiB"):  # rawCapBytes
                stated: Any = int(value.split()[0]) * 1024 * 1024
            elif value.startswith("`"):
                stated = value.strip("`")
            else:
                stated = json.loads(value)
            actual = getattr(model, _snake(key))
            found.append(
                (row[1], key, stated, list(actual) if isinstance(actual, tuple) else actual)
            )
    return found


def test_the_configuration_table_states_the_code_defaults() -> None:
    stated = _stated_defaults()
    assert {"maxChars", "atFraction", "ledgerCap", "timeoutMs", "batchSize"} <= {
        k for _, k, *_ in stated
    }
    assert [s for s in stated if s[2] != s[3]] == []


def _variables() -> dict[str, str]:
    """Each setting's field name by the variable that sets it (``CASCADE_PORT``,
    ``DATABASE_URL``)."""
    out = {}
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        out[alias if isinstance(alias, str) else f"CASCADE_{name.upper()}"] = name
    return out


_PROSE_DEFAULTS = {"config", "data_dir"}
"""Settings whose default README states in words (found at run time), not as a value."""


def test_the_environment_table_states_the_settings_defaults() -> None:
    """Each row naming settings' variables (``| `A` / `B` | a / b |`` too) states each one's
    default: a plain value (a number, or one word in backticks), or ``unset`` for one whose
    default is nothing (None, empty, false). And each ``CASCADE_*`` variable a row names is a
    setting's, or one the project reads elsewhere: none is documented and never read."""
    variables, checked = _variables(), {}
    for line in LINES:
        row = re.match(r"\| ((?:`[A-Z_]+`(?: / )?)+) \| ([^|]+) \|", line)
        if row is None:
            continue
        named = re.findall(r"`([A-Z_]+)`", row[1])
        stated_all = [s.strip() for s in row[2].split(" / ")]
        if len(stated_all) != len(named):
            stated_all = [row[2].strip()] * len(named)
        for variable, stated in zip(named, stated_all, strict=True):
            if variable.startswith("CASCADE_"):
                assert variable in variables or variable in OTHER_VARIABLES, variable
            if variable not in variables or variables[variable] in _PROSE_DEFAULTS:
                continue
            default = Settings.model_fields[variables[variable]].default
            if stated.startswith("unset"):
                assert not default, variable
            elif isinstance(default, bool):
                assert stated.strip("`") == str(default).lower(), variable
            elif isinstance(default, int | float):
                assert float(stated.strip("`")) == default, variable
            else:
                assert stated.strip("`") == default, variable
            checked[variable] = stated
    assert set(checked) == set(variables) - {
        v for v, name in variables.items() if name in _PROSE_DEFAULTS
    }


def test_the_transient_events_readme_names_are_the_transient_ones() -> None:
    """The event stream's paragraph names every transient event; the Decisions' bullet on
    replay names those without a bullet of their own (the delta's follows it)."""
    stream = README.split(" are transient (no `id:`")[0].rsplit(". ", 1)[1]
    assert set(re.findall(r"`([\w.]+)`", stream)) == types.TRANSIENT_EVENTS
    replay = re.search(r"Nor are the transient (.*?) \(DESIGN §6\)", README)
    assert replay is not None
    named = set(re.findall(r"`([\w.]+)`", replay[1]))
    assert named == types.TRANSIENT_EVENTS - {types.MESSAGE_DELTA_APPENDED}
    assert f"**`{types.MESSAGE_DELTA_APPENDED}`** (transient" in README


def test_every_section_of_docs_perf_readme_quotes_is_a_heading_there() -> None:
    perf = (ROOT / "docs" / "perf.md").read_text(encoding="utf-8")
    headings = [line.lstrip("#").strip() for line in perf.splitlines() if line.startswith("#")]
    cited = re.findall(r'docs/perf\.md[,:;]? ((?:"[^"]+"(?:,| and| or)? ?)+)', README)
    quoted = [q for group in cited for q in re.findall(r'"([^"]+)"', group)]
    assert "a freed session wakes its waiter" in quoted
    assert [q for q in quoted if not any(q in h for h in headings)] == []


@pytest.mark.parametrize("refusal", ["setting", "database"])
def test_the_exit_statuses_of_a_refused_start_are_the_ones_readme_states(refusal: str) -> None:
    """One start a case: each is a process's import and refusal, about a second."""
    section = README.split("### Start-up")[1].split("### ")[0]
    base = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")}
    if refusal == "setting":
        assert (
            "or the tracing exporter refused, with exit status 2, before anything starts" in section
        )
        refused = run_start(SERVE, {**base, "CASCADE_LOG_LEVEL": "loud"})
        assert (refused.returncode, refused.stderr.count("\n")) == (2, 1), refused.stderr
        return
    assert "a database the start cannot reach" in section  # not one it cannot migrate: 2
    assert "PostgreSQL's own reason), with exit status 3" in section
    unreachable = run_start(SERVE, {**base, "DATABASE_URL": "postgresql://u:pw@127.0.0.1:1/x"})
    assert unreachable.returncode == 3, unreachable.stderr
    assert "cannot start: cannot connect to PostgreSQL at postgresql://u:***@" in unreachable.stderr


def test_every_constant_readme_names_by_its_module_is_one() -> None:
    """``server.UNREAD_SECONDS``, ``bus.MAX_QUEUED``: a constant renamed or moved leaves the
    name README sends a reader to pointing nowhere."""
    named = set(re.findall(r"`((?:[a-z_]+\.)+)([A-Z][A-Z_]+)`", README))
    assert len(named) >= 3
    missing = [
        f"{module}{name}"
        for module, name in named
        if not hasattr(importlib.import_module(f"proxy.{module.rstrip('.')}"), name)
    ]
    assert missing == []


def test_the_metrics_readme_lists_are_the_ones_exported() -> None:
    """Each metric README's Metrics names is exported, and each the proxy exports (but the
    client library's process_* and python_info) is named there."""
    section = TEXT.split("### Metrics")[1].split("\n### ")[0]
    named = set(re.findall(r"`((?:cascade|gen_ai)_[a-z_]+)", section))
    exported = set()
    for family in Metrics().registry.collect():
        if family.name.startswith(("cascade_", "gen_ai_")):
            exported.add(family.name + ("_total" if family.type == "counter" else ""))
    assert named == exported


def _plain(value: str) -> Any:
    """A default as the table writes it: unset, a backticked JSON value or word, or a number."""
    value = value.strip()
    if value == "unset":
        return None
    if value.startswith("`"):
        value = value.strip("`")
        return value if value.isidentifier() else json.loads(value)
    return json.loads(value)


def test_the_per_name_and_one_key_rows_state_the_code_defaults() -> None:
    """Rows the block-wise check above cannot read: ``providers``, ``agents`` and ``models``
    entries (``| `a.<name>.k1` / `k2` | d1 / d2 |``) and single keys of a ``context`` block."""
    models = {"providers": ProviderConfig, "agents": AgentConfig, "models": ModelConfig}
    checked = []
    for line in LINES:
        named = re.match(
            r"\| `(providers|agents|models)\.<name>\.(\w+)`((?: / `\w+`)*) \| ([^|]+) \|", line
        )
        one = re.match(r"\| `context\.(\w+)\.(\w+)` \| ([^|]+) \|", line)
        if named is not None:
            model: Any = models[named[1]]()
            keys = [named[2], *re.findall(r"`(\w+)`", named[3])]
            values = named[4].split(" / ")
        elif one is not None:
            model = getattr(ContextConfig(), _snake(one[1]))
            keys, values = [one[2]], [one[3]]
        else:
            continue
        assert len(keys) == len(values), line
        for key, value in zip(keys, values, strict=True):
            if key == "baseUrl":
                assert value == "OpenAI's URL" and model.base_url == "https://api.openai.com/v1"
                continue
            actual = getattr(model, _snake(key))
            stated = _plain(value)
            assert (list(actual) if isinstance(actual, tuple) else actual) == stated, (line, key)
            checked.append(key)
    assert {"timeoutSeconds", "verifyTls", "provider", "reservedOutput", "userPrefixes"} <= set(
        checked
    )
    assert {"enabled", "mode", "context"} <= set(checked)


def test_each_default_that_differs_from_designs_example_is_a_decision() -> None:
    """DESIGN's example config shows the ``context`` defaults; each the code sets otherwise
    is named in README Decisions with both values, so a default tuned again (or put back)
    fails here until the Decision says so."""
    differ = {}
    for block, values in design.CONTEXT_EXAMPLE.items():
        model = getattr(ContextConfig(), _snake(block))
        for key, value in values.items():
            actual = getattr(model, _snake(key))
            if (list(actual) if isinstance(actual, tuple) else actual) != value:
                differ[f"{block}.{key}"] = (value, actual)
    assert "eviction.atFraction" in differ
    at = differ.pop("eviction.atFraction")
    assert (
        f"**Eviction is considered from {at[1]:g} of the limit**, "
        f"where DESIGN's example config has {at[0]:g}." in README
    )
    decision = README.split(f"**{_number(len(differ))} more defaults differ from DESIGN's")[1]
    decision = decision.split("\n- **")[0].split(" - **")[0]
    for name, (value, actual) in differ.items():
        assert f"`{name}` {actual:g} (not {value:g}:" in decision, name


def test_the_context_example_held_as_designs_is_its_example_configs() -> None:
    match = re.search(r"```json\n(.*?)```", design.design_text(), re.S)
    assert match is not None
    assert json.loads(match[1])["context"] == design.CONTEXT_EXAMPLE


def _number(n: int) -> str:
    return ["No", "One", "Two", "Three", "Four", "Five", "Six"][n]
