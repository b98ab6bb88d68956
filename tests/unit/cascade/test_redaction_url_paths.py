"""Secrets that are a URL's path, with no key naming them: a Telegram bot's token, a Slack
or a Discord webhook's. The host and the path's fixed words stay, the secret goes."""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import quote

import pytest

from proxy.cascade.redaction import REDACTED, compile_patterns, redact
from tests.unit.linear import assert_linear

PATTERNS = compile_patterns(())
_TELEGRAM = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
_SLACK = "T024BE7LD/B024BE7LH/bJtrpFi1fO1JMCcwLx8uZyAg"
_DISCORD = "1234567890123456789/" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7" * 2 + "cF0hJ3lM6oR9uX2"


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (
            f"curl https://api.telegram.org/bot{_TELEGRAM}/sendMessage -d chat_id=42",
            f"curl https://api.telegram.org/bot{REDACTED}/sendMessage -d chat_id=42",
        ),
        (
            f"GET https://api.telegram.org/file/bot{_TELEGRAM}/photos/file_1.jpg",
            f"GET https://api.telegram.org/file/bot{REDACTED}/photos/file_1.jpg",
        ),
        (
            f'{{"url": "https://hooks.slack.com/services/{_SLACK}"}}',
            f'{{"url": "https://hooks.slack.com/services/{REDACTED}"}}',
        ),
        (
            f"https://ptb.discord.com/api/webhooks/{_DISCORD}",
            f"https://ptb.discord.com/api/webhooks/{_DISCORD.split('/')[0]}/{REDACTED}",
        ),
        (
            f"POST https://discord.com/api/webhooks/{_DISCORD}?wait=true",
            f"POST https://discord.com/api/webhooks/{_DISCORD.split('/')[0]}/{REDACTED}?wait=true",
        ),
        (  # with its port
            f"https://api.telegram.org:443/bot{_TELEGRAM}/getMe",
            f"https://api.telegram.org:443/bot{REDACTED}/getMe",
        ),
        (
            f"https://discordapp.com/api/v10/webhooks/{_DISCORD}",
            f"https://discordapp.com/api/v10/webhooks/{_DISCORD.split('/')[0]}/{REDACTED}",
        ),
    ],
)
def test_a_secret_that_is_a_urls_path_is_redacted(text: str, kept: str) -> None:
    out, n = redact(text, PATTERNS)
    assert (out, n) == (kept, 1)
    assert redact(out, PATTERNS) == (out, 0)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (  # JSON text whose slashes are escaped (PHP's ``json_encode``)
            f'{{"url": "https:\\/\\/api.telegram.org\\/bot{_TELEGRAM}\\/sendMessage"}}',
            f'{{"url": "https:\\/\\/api.telegram.org\\/bot{REDACTED}\\/sendMessage"}}',
        ),
        (
            '{"hook": "https:\\/\\/hooks.slack.com\\/services\\/'
            + _SLACK.replace("/", "\\/")
            + '"}',
            f'{{"hook": "https:\\/\\/hooks.slack.com\\/services\\/{REDACTED}"}}',
        ),
        (
            '"https:\\/\\/discord.com\\/api\\/webhooks\\/' + _DISCORD.replace("/", "\\/") + '"',
            '"https:\\/\\/discord.com\\/api\\/webhooks\\/'
            + _DISCORD.split("/")[0]
            + f'\\/{REDACTED}"',
        ),
        (  # a host in capitals
            f"https://API.Telegram.ORG/bot{_TELEGRAM}/getMe",
            f"https://API.Telegram.ORG/bot{REDACTED}/getMe",
        ),
        (
            f"https://Hooks.Slack.com/services/{_SLACK}",
            f"https://Hooks.Slack.com/services/{REDACTED}",
        ),
        (
            f"https://Discord.com/api/webhooks/{_DISCORD}",
            f"https://Discord.com/api/webhooks/{_DISCORD.split('/')[0]}/{REDACTED}",
        ),
    ],
)
def test_a_url_path_secret_with_escaped_slashes_or_a_capitalised_host_is_redacted(
    text: str, kept: str
) -> None:
    out, n = redact(text, PATTERNS)
    assert (out, n) == (kept, 1)
    if text.startswith(("{", '"')):
        json.loads(out)


def test_a_url_path_secret_in_a_calls_arguments_stays_json() -> None:
    args = json.dumps({"cmd": f"curl https://api.telegram.org/bot{_TELEGRAM}/getMe"})
    out, n = redact(args, PATTERNS)
    assert n == 1 and json.loads(out)["cmd"] == f"curl https://api.telegram.org/bot{REDACTED}/getMe"


@pytest.mark.parametrize(
    "text",
    [
        "https://api.telegram.org/bot<token>/sendMessage",
        "https://api.telegram.org/bot$TELEGRAM_TOKEN/getUpdates",
        "https://hooks.slack.com/services/YOUR/WEBHOOK/URL",
        "https://hooks.slack.com/",
        "https://discord.com/api/webhooks/{id}/{token}",
        "See https://discord.com/developers/docs/resources/webhook for webhooks.",
    ],
)
def test_a_placeholder_in_those_urls_is_kept(text: str) -> None:
    assert redact(text, PATTERNS) == (text, 0)


@pytest.mark.parametrize(
    ("hostile", "count"),
    [
        (lambda n: "://api.telegram.org/bot" * n, 5_000),
        (lambda n: ":\\/\\/api.telegram.org\\/bot" * n, 5_000),
        (lambda n: "/Telegram.ORG:1/bot1:" * n, 5_000),
        (lambda n: ".discord.com\\/api\\/v1\\/webhooks\\/12345\\/" * n, 3_000),
        (lambda n: ":\\/\\/hooks.slack.com\\/services\\/" + "a\\/" * n, 30_000),
        (lambda n: "://api.telegram.org/bot1234567:" + "A" * n, 100_000),
        (lambda n: "://hooks.slack.com/services/" * n, 4_000),
        (lambda n: "://a.b.c.d.e.f.g.h.i." * n, 5_000),
        (lambda n: "://" + "a." * n, 50_000),
        (lambda n: "://discord.com/api/webhooks/" * n, 4_000),
        (lambda n: "://discord.com/api/webhooks/" + "1" * n, 100_000),
        (lambda n: "://discordapp.com/api/v1/webhooks/1/" + "a" * n, 100_000),
    ],
)
def test_those_patterns_read_hostile_text_in_linear_time(
    hostile: Callable[[int], str], count: int
) -> None:
    assert_linear(hostile, count)


def test_a_url_path_secret_without_a_scheme_is_redacted_and_another_hosts_is_kept() -> None:
    assert redact(f"see discord.com/api/webhooks/{_DISCORD}", PATTERNS) == (
        f"see discord.com/api/webhooks/{_DISCORD.split('/')[0]}/{REDACTED}",
        1,
    )
    for text in (
        f"https://evil-slack.com/services/{_SLACK}",
        f"https://mydiscord.com/api/webhooks/{_DISCORD}",
    ):
        assert redact(text, PATTERNS) == (text, 0)


@pytest.mark.parametrize("levels", [2, 3])
@pytest.mark.parametrize(
    ("url", "secret"),
    [
        (f"https://api.telegram.org/bot{_TELEGRAM}/getMe", _TELEGRAM),
        (f"https://hooks.slack.com/services/{_SLACK}", _SLACK),
        (f"https://discord.com/api/webhooks/{_DISCORD}", _DISCORD.split("/")[1]),
    ],
)
def test_a_url_path_secret_in_json_inside_json_with_escaped_slashes_is_redacted(
    url: str, secret: str, levels: int
) -> None:
    text = json.dumps({"url": url}).replace("/", "\\/")  # PHP's json_encode
    for _ in range(levels - 1):
        text = json.dumps({"l": text})
    out, n = redact(text, PATTERNS)
    assert n == 1 and secret.split("/")[-1] not in out
    inner = json.loads(out)
    for _ in range(levels - 1):
        inner = json.loads(inner["l"])
    assert REDACTED in inner["url"] and inner["url"].startswith("https://")


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        (f"https://api.telegram.org/bot{_TELEGRAM}/getMe", _TELEGRAM),
        (f"https://hooks.slack.com/services/{_SLACK}", _SLACK),
        (f"https://discord.com/api/webhooks/{_DISCORD}", _DISCORD.split("/")[1]),
    ],
)
def test_a_url_path_secret_percent_encoded_is_redacted(url: str, secret: str) -> None:
    text = "GET /login?next=" + quote(url, safe="") + "&x=1"
    out, n = redact(text, PATTERNS)
    assert n == 1 and quote(secret, safe="").split("%2F")[-1] not in out
    assert out.endswith("&x=1") and "%2Fbot" in out or "services" in out or "webhooks" in out
