"""Source code that names a token or password is not taken for a secret.

The built-in ``token = …`` / ``password: …`` pattern redacted code a coding agent reads: a
call (``token = cast(MetaSegment, token)``), a subscript (``tokens: Sequence[Segment]``), a
comment after the colon (``if not tokens:  # pragma``), a printf placeholder
(``"Lexed tokens: %s"``), a type annotation (``password: str``). The model read
``token = [REDACTED](MetaSegment, token)``, an edit made from it failed, and a result with
anything redacted is never spilled, so its cut middle was gone for good. These are the
shapes recorded agents read (sqlfluff's linter in the mini-swe-agent transcript, a web
page's script in OpenHands'); a value after the key is still redacted.
"""

from __future__ import annotations

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.read_tool_output_helpers import chat, history
from tests.integration.api.test_read_tool_output_answers import (
    config_path,  # noqa: F401  (the module's config: maxChars 2000, raw outputs kept)
)
from tests.integration.transcripts import api, blob, read_all

CODE = """\
def lex(self, templated_file, config):
    tokens, lex_vs = lexer.lex(templated_file)
    linter_logger.info("Lexed tokens: %s", [seg.raw for seg in tokens])
    if not tokens:  # pragma: no cover
        return None
    for token in cast(Tuple[BaseSegment, ...], tokens):
        token = cast(MetaSegment, token)
    return self._parse_tokens(tokens)

def _parse_tokens(tokens: Sequence[BaseSegment], config: FluffConfig):
    csrfToken = document.querySelector("meta[name=csrf]")
    login(user="me", password=read_password(path))

def login(user: str, password: str) -> None: ...
"""


def test_code_that_names_a_token_goes_upstream_as_written_and_reads_back(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    output = CODE + blob(6000, "rest") + "\nDB_PASSWORD=hunter22\n"
    chat(proxy, "code", history("call_view", output))
    sent = next(m["content"] for m in fake_upstream.bodies()[-1]["messages"] if m["role"] == "tool")
    assert sent.startswith(CODE), sent[: len(CODE)]
    assert sent.endswith("\nDB_PASSWORD=[REDACTED]\n")  # a secret after the key still goes
    assert "[REDACTED]" not in sent[: len(CODE)]


def test_a_cut_source_file_naming_tokens_is_spilled_and_reads_back_exactly(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    output = CODE + blob(6000, "rest")
    chat(proxy, "code-cut", history("call_view", output))
    sent = next(m["content"] for m in fake_upstream.bodies()[-1]["messages"] if m["role"] == "tool")
    assert 'read the rest with read_tool_output({"id": "call_view@2"' in sent
    with api(proxy) as http:
        assert read_all(http, "code-cut", "call_view") == output
