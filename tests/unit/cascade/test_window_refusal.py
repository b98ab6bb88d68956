"""Reading a provider's refusal for length, and what the session's ratio learns from it."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from proxy.cascade.tokens import LEARN_MARGIN, MAX_RATIO, learned_ratio
from proxy.cascade.window_refusal import WindowRefusal, window_refusal


def _openai(message: str, code: str | None = "context_length_exceeded") -> bytes:
    error = {"message": message, "type": "invalid_request_error", "param": "messages", "code": code}
    return json.dumps({"error": error}).encode()


@pytest.mark.parametrize(
    ("status", "body", "told", "window"),
    [
        (  # OpenAI
            400,
            _openai(
                "This model's maximum context length is 128000 tokens. However, your messages "
                "resulted in 130,532 tokens. Please reduce the length of the messages."
            ),
            130532,
            128000,
        ),
        (  # OpenAI's newer wording: the code alone says it
            400,
            _openai("Your input exceeds the context window of this model."),
            None,
            None,
        ),
        (  # vLLM (and OpenAI's older wording): the messages' share, not the total
            400,
            _openai(
                "This model's maximum context length is 4096 tokens. However, you requested "
                "5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the "
                "length of the messages or completion.",
                code=None,
            ),
            4000,
            4096,
        ),
        (  # vLLM, newer
            400,
            json.dumps(
                {
                    "object": "error",
                    "message": "This model's maximum context length is 2048 tokens. However, "
                    "your request has 3000 input tokens. Please reduce the length of the input "
                    "messages.",
                    "type": "BadRequestError",
                    "code": 400,
                }
            ).encode(),
            3000,
            2048,
        ),
        (  # llama.cpp, with its count fields
            400,
            json.dumps(
                {
                    "error": {
                        "code": 400,
                        "message": "the request exceeds the available context size, try "
                        "increasing it",
                        "type": "exceed_context_size_error",
                        "n_prompt_tokens": 5000,
                        "n_ctx": 4096,
                    }
                }
            ).encode(),
            5000,
            4096,
        ),
        (  # Anthropic's OpenAI-compatible endpoint
            400,
            json.dumps(
                {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": "prompt is too long: 210000 tokens > 200000 maximum",
                    },
                }
            ).encode(),
            210000,
            200000,
        ),
        (  # TGI
            422,
            json.dumps(
                {
                    "error": "Input validation error: `inputs` tokens + `max_new_tokens` must "
                    "be <= 4096. Given: 5000 `inputs` tokens and 100 `max_new_tokens`",
                    "error_type": "validation",
                }
            ).encode(),
            5000,
            4096,
        ),
        (  # Mistral
            400,
            json.dumps(
                {
                    "object": "error",
                    "message": "Prompt contains 40000 tokens and 0 draft tokens, too large for "
                    "model with 32768 maximum context length",
                    "type": "invalid_request_message_error",
                }
            ).encode(),
            40000,
            32768,
        ),
        (400, b"the prompt is too long: 9000 tokens > 8192 maximum", 9000, 8192),  # not JSON
        (  # Gemini
            400,
            _openai(
                "The input token count (1200000) exceeds the maximum number of tokens allowed "
                "(1048576).",
                code=None,
            ),
            1200000,
            1048576,
        ),
        (  # vLLM's engine
            400,
            _openai("Input prompt (5000 tokens) is too long and exceeds limit of 4096", code=None),
            5000,
            4096,
        ),
    ],
)
def test_refusals_for_length_are_read_with_the_providers_counts(
    status: int, body: bytes, told: int | None, window: int | None
) -> None:
    assert window_refusal(status, body) == WindowRefusal(told, window)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, _openai("Invalid schema for function 'f'", code="invalid_schema")),
        (429, _openai("Rate limit reached for requests", code="rate_limit_exceeded")),
        (500, _openai("maximum context length is 4096 tokens")),  # a server error: not one
        (400, b"not json, and no word of a window"),
        (413, _openai("Request body exceeds the maximum allowed size", code=None)),
        (400, b"[1, 2]"),
    ],
)
def test_other_errors_are_no_refusal_for_length(status: int, body: Any) -> None:
    assert window_refusal(status, body) is None


def test_a_bogus_count_is_no_count() -> None:
    body = _openai("However, your messages resulted in 99999999999999999999 tokens.")
    assert window_refusal(400, body) == WindowRefusal(None, None)


def test_the_learned_ratio_counts_the_prompt_at_the_providers_count() -> None:
    assert learned_ratio(1.0, estimate=3000, budget=3500, told=4800) == pytest.approx(1.6)


def test_without_a_count_the_prompt_counts_past_the_budget() -> None:
    new = learned_ratio(1.0, estimate=3000, budget=3500)
    assert 3000 * new == pytest.approx(3500 * LEARN_MARGIN)


def test_a_count_within_the_budget_is_learned_without_the_margin() -> None:
    """The provider counts the prompt inside the guard's room: what it refused is the output
    asked for (``max_tokens``) or a window below ``contextLimit``, which trimming the
    history does not fix; the ratio learns the provider's count of the prompt, nothing more."""
    assert learned_ratio(1.0, estimate=3000, budget=3500, told=3200) == pytest.approx(3200 / 3000)
    # vLLM's "'max_tokens' ... is too large": a small prompt is not counted at twice its size
    assert learned_ratio(1.0, estimate=95, budget=3500, told=100) == pytest.approx(100 / 95)
    assert learned_ratio(1.0, estimate=120, budget=3500, told=100) == 1.0


def test_the_learned_ratio_is_capped_and_never_lowered() -> None:
    assert learned_ratio(1.0, estimate=100, budget=3500, told=10**9) == MAX_RATIO
    assert learned_ratio(1.8, estimate=3000, budget=3500, told=3600) == 1.8
    assert learned_ratio(1.2, estimate=0, budget=3500, told=3600) == 1.2


def test_a_nested_body_is_no_refusal_and_no_error() -> None:
    """A body nested past the JSON decoder's depth is read as text, never raised on: the
    refusal is relayed all the same."""
    assert window_refusal(400, b"[" * 20000) is None


_ASKED = "What is the context window of llama 3, and its maximum context length?"
_VALIDATION = (  # vLLM's 400 for a request it cannot parse, quoting the client's input
    "1 validation error for ChatCompletionRequest\nmessages.0.content\n  Input should be a "
    f"valid string [type=string_type, input_value={{'text': '{_ASKED}'}}, input_type=dict]"
)


def test_the_clients_own_text_quoted_back_is_no_refusal() -> None:
    """A validation error quoting the client's message, which speaks of a context window,
    is not the provider refusing the prompt as too long."""
    sent = [{"role": "user", "content": [{"type": "text", "text": _ASKED}]}]
    body = json.dumps({"object": "error", "message": _VALIDATION, "code": 400}).encode()
    assert window_refusal(400, body, sent) is None
    assert window_refusal(400, _VALIDATION.encode(), sent) is None  # not JSON
    # a real refusal of a prompt that talks of windows is one all the same
    real = _openai("This model's maximum context length is 4096 tokens.", code=None)
    assert window_refusal(400, real, sent) == WindowRefusal(None, 4096)


def test_a_rate_limit_on_tokens_per_minute_is_no_refusal_for_length() -> None:
    """Groq answers a prompt over its tokens-per-minute quota with a 413 "too large for
    model": the prompt fits the window, it is the quota it exceeds."""
    message = (
        "Request too large for model `llama-3.3-70b-versatile` in organization `org_1` service "
        "tier `on_demand` on tokens per minute (TPM): Limit 12000, Requested 18231, please "
        "reduce your message size and try again."
    )
    body = json.dumps(
        {"error": {"message": message, "type": "tokens", "code": "rate_limit_exceeded"}}
    )
    assert window_refusal(413, body.encode()) is None
    assert window_refusal(413, message.encode()) is None  # its message alone, not JSON


@pytest.mark.parametrize(
    ("message", "told"),
    [
        (  # OpenRouter: the total it names counts the output asked for too
            "This endpoint's maximum context length is 131072 tokens. However, you requested "
            "about 138956 tokens (7884 of text input, 131072 in the output). Please reduce the "
            'length of either one, or use the "middle-out" transform to compress your prompt '
            "automatically.",
            7884,
        ),
        (  # with tools: their schema is the prompt's too
            "This endpoint's maximum context length is 204800 tokens. However, you requested "
            "about 205432 tokens (81684 of text input, 3748 of tool input, 120000 in the "
            "output). Please reduce the length of either one",
            81684 + 3748,
        ),
        (  # Gemini through OpenRouter
            "This model's maximum context length is 8192 tokens, however you requested 8977 "
            "tokens (7977 in your prompt; 1000 for the completion). Please reduce your prompt; "
            "or completion length.",
            7977,
        ),
    ],
)
def test_the_prompts_share_is_read_not_the_total_with_the_output(message: str, told: int) -> None:
    refusal = window_refusal(400, _openai(message, code=None))
    assert refusal is not None and refusal.told == told


@pytest.mark.parametrize(
    "body",
    [
        {"message": "Input is too long for requested model."},  # Bedrock (its access gateway)
        {  # LiteLLM's proxy, in front of any of them: its exception's name says it
            "error": {
                "message": "litellm.ContextWindowExceededError: litellm.BadRequestError: "
                "BedrockException - Input is too long for requested model.",
                "type": None,
                "param": None,
                "code": "400",
            }
        },
    ],
)
def test_bedrocks_and_litellms_wordings_are_refusals_for_length(body: Any) -> None:
    assert window_refusal(400, json.dumps(body).encode()) == WindowRefusal(None, None)


def test_a_code_named_in_a_label_is_no_quotation() -> None:
    """A stream's error object reaches the reading as its type and code alone
    (``chunk_faults.error_answer``): a client who wrote of ``context_length_exceeded`` itself does
    not make the code a quotation (a quotation is a stretch of words)."""
    label = "type 'invalid_request_error', code 'context_length_exceeded'"
    sent = [{"role": "user", "content": "why do I get context_length_exceeded?"}]
    assert window_refusal(400, label, sent) == WindowRefusal(None, None)


def test_anthropics_input_and_max_tokens_wording_is_read() -> None:
    """Anthropic names the input and the output asked for apart, and its window."""
    body = json.dumps(
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "input length and `max_tokens` exceed context limit: 197202 + 21333 "
                "> 200000, decrease input length or `max_tokens` and try again",
            },
        }
    )
    assert window_refusal(400, body.encode()) == WindowRefusal(197202, 200000)


_GROQ_CAP = (
    "`max_tokens` must be less than or equal to `8192`, the maximum value for `max_tokens` is "
    "less than the `context_window` for this model"
)


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": _GROQ_CAP, "type": "invalid_request_error", "param": "max_tokens"}},
        {"error": {"message": _GROQ_CAP.replace("max_tokens", "max_completion_tokens")}},
        {"error": {"message": "max_tokens exceeds the limit of 4096 for this model"}},
        {"error": {"message": "max_tokens (128000) exceeds the maximum output tokens (65536)"}},
        {
            "error": {
                "message": "max_tokens is too large: 100000. This model supports at most "
                "16384 completion tokens, whereas you provided 100000.",
                "type": "invalid_request_error",
                "param": "max_tokens",
                "code": None,
            }
        },
    ],
)
def test_an_output_cap_is_no_refusal_for_length(body: Any) -> None:
    """Groq's cap on ``max_tokens`` names the model's ``context_window``; it refuses the output
    asked for, which no trimming of the prompt changes (OpenAI's says nothing of a window)."""
    assert window_refusal(400, json.dumps(body).encode()) is None


def test_a_deeply_nested_message_is_walked_without_recursion() -> None:
    nested: Any = "deep"
    for _ in range(5000):
        nested = [nested]
    sent = [{"role": "user", "content": "hi", "extra": nested}]
    real = _openai("This model's maximum context length is 4096 tokens.", code=None)
    assert window_refusal(400, real, sent) == WindowRefusal(None, 4096)


def test_a_message_quoting_the_client_at_length_is_looked_up_a_bounded_number_of_times() -> None:
    """Each stretch of the message is looked up in the sent text (megabytes, in a long
    session) once, and only the first few: past them the message is a quotation."""
    quoted = [f"is the context window {i} enough" for i in range(12)]
    sent = [{"role": "user", "content": " ".join(quoted)}, {"role": "tool", "content": "x" * 10}]
    message = ", ".join(f"'{q}'" for q in quoted + quoted) + ". Maximum context length exceeded"
    assert window_refusal(400, message.encode(), sent) is None
    assert window_refusal(
        400, ", ".join(f"'{q}'" for q in quoted[:3]) + ". Maximum context length exceeded", sent
    ) == WindowRefusal(None, None)


@pytest.mark.parametrize("window", ["128k", "1.5M", "128.000"])
def test_a_window_written_short_or_with_a_decimal_is_no_count(window: str) -> None:
    """ "128k" (or "1.5M", or a thousands dot) is not a window of 128 (or 1): a figure
    followed by a unit or decimals is left unread rather than read wrong."""
    body = _openai(f"This model's maximum context length is {window} tokens.")
    assert window_refusal(400, body) == WindowRefusal(None, None)


def _cpu(read: Callable[[], object]) -> float:
    """The least CPU time of three runs of five reads: this process's own time, so another
    process's load on the machine stays out of it."""
    runs = []
    for _ in range(3):
        started = time.process_time()
        for _ in range(5):
            read()
        runs.append(time.process_time() - started)
    return min(runs)


@pytest.mark.parametrize("body", ["token " * 4000, "exceeds the maximum " * 1000 + "x"])
def test_a_long_message_full_of_the_wordings_words_is_read_in_linear_time(body: str) -> None:
    """A message of ``token`` and ``exceeds the maximum`` over and over (a client's text
    quoted back) costs no scan to its end per word: reading it costs about as much as
    finding its words ten times over, where the scan per word cost tens of times more. The
    bound is a ratio to that baseline, measured in the same test."""
    words = [re.compile(p, re.IGNORECASE) for p in (r"token", r"exceeds? (?:the )?maximum")]
    baseline = _cpu(lambda: [list(w.finditer(body)) for _ in range(10) for w in words])
    assert _cpu(lambda: window_refusal(400, body.encode())) < 5 * baseline


def test_a_refusal_in_words_the_session_holds_is_one_all_the_same() -> None:
    """Bedrock's refusal is one fixed sentence, which a long session (the kind refused) may
    hold already, in a tool's output of an earlier failure: the whole message, quoted by
    nothing, is the provider's own words, not a quotation."""
    said = "Input is too long for requested model."
    sent = [{"role": "tool", "content": f"ValidationException: {said}\nretrying"}]
    body = json.dumps({"message": said}).encode()
    assert window_refusal(400, body, sent) == WindowRefusal(None, None)
    # quoted between quotes, the same words are the client's
    echo = json.dumps({"message": f"Invalid value: '{said}'"}).encode()
    assert window_refusal(400, echo, [{"role": "user", "content": said}]) is None
