"""Secrets as agents' tools print them with no key the keyed pass reads: a Kubernetes Secret's
base64 data (a private key's PEM block, a registry's Docker config), a URL's password in JSON
inside JSON whose slashes are escaped."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest

from proxy.cascade.redaction import REDACTED, compile_patterns, redact
from proxy.cascade.redaction_scan import scanner_for
from tests.unit.linear import assert_linear

PATTERNS = compile_patterns(())
_PEM = (
    "-----BEGIN {}-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END {}-----\n"
)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "kind",
    [
        "PRIVATE KEY",
        "RSA PRIVATE KEY",
        "EC PRIVATE KEY",
        "OPENSSH PRIVATE KEY",
        "DSA PRIVATE KEY",
        "ENCRYPTED PRIVATE KEY",
        "PGP PRIVATE KEY BLOCK",
    ],
)
def test_a_private_keys_pem_block_in_base64_is_redacted(kind: str) -> None:
    blob = _b64(_PEM.format(kind, kind))
    text = f"apiVersion: v1\ndata:\n  tls.crt: x\n  tls.key: {blob}\nkind: Secret\n"
    # ``LS`` (``--``) is kept: the pattern begins past it
    assert redact(text, PATTERNS) == (text.replace(blob, "LS" + REDACTED), 1)
    quoted = f'{{"data": {{"tls.key": "{blob}"}}}}'
    assert redact(quoted, PATTERNS) == (quoted.replace(blob, "LS" + REDACTED), 1)


@pytest.mark.parametrize("width", [64, 76])
@pytest.mark.parametrize("newline", ["\n", "\r\n", "\\n"])
def test_a_private_keys_pem_block_in_base64_wrapped_in_lines_is_redacted_whole(
    width: int, newline: str
) -> None:
    # ``base64 key.pem`` wraps at 76 columns, ``openssl base64`` at 64: every line is the key's
    blob = _b64(_PEM.format("RSA PRIVATE KEY", "RSA PRIVATE KEY") * 3)
    lines = newline.join(blob[i : i + width] for i in range(0, len(blob), width))
    text = f"$ base64 key.pem{newline}{lines}{newline}$ ls{newline}kind: x"
    assert redact(text, PATTERNS) == (text.replace(lines, "LS" + REDACTED), 1)


def test_a_docker_config_in_base64_is_redacted() -> None:
    config = '{"auths":{"registry.example.com":{"auth":"' + _b64("admin:hunter2") + '"}}}'
    blob = _b64(config)
    text = f"data:\n  .dockerconfigjson: {blob}\ntype: kubernetes.io/dockerconfigjson"
    assert redact(text, PATTERNS) == (text.replace(blob, REDACTED), 1)


@pytest.mark.parametrize(
    "text",
    [
        f"  tls.crt: {_b64(_PEM.format('CERTIFICATE', 'CERTIFICATE'))}",
        f"  public: {_b64('-----BEGIN PUBLIC KEY-----')}",
        "  config: " + _b64('{"kind": "Config"}'),
        "xLS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t",
    ],
)
def test_a_certificate_a_public_key_or_other_base64_is_kept(text: str) -> None:
    assert redact(text, PATTERNS) == (text, 0)


@pytest.mark.parametrize(
    ("hostile", "count"),
    [
        (lambda n: "LS0tLS1CRUdJTiBQUklWQVRF" * n, 10_000),
        (
            lambda n: "LS0tLS1CRUdJTiBQUklWQVRF" + ("\n" + "A" * 76) * n + "\n" + "A" * 76 + "\n!",
            1_300,
        ),
        (lambda n: "eyJhdXRocyI6" * n, 20_000),
        (lambda n: "0tLS1CRUdJTiB" * n, 20_000),
        (lambda n: ":\\\\" * n, 50_000),
        (lambda n: ":\\\\/" * n, 30_000),
        (lambda n: ":\\\\\\" * n, 30_000),
        (lambda n: ":" + "\\" * n + "/", 100_000),
        (lambda n: "://" + "a1" * n + "@", 50_000),
    ],
)
def test_those_shapes_are_read_in_linear_time(hostile: Callable[[int], str], count: int) -> None:
    assert_linear(hostile, count)


@pytest.mark.parametrize("php", [False, True])
@pytest.mark.parametrize("levels", [2, 3])
def test_a_urls_password_in_json_inside_json_with_escaped_slashes_is_redacted(
    levels: int, php: bool
) -> None:
    text = json.dumps({"u": "postgres://app:hunter2@db:5432/x"}).replace("/", "\\/")
    for _ in range(levels - 1):
        text = json.dumps({"l": text})
        if php:  # PHP's json_encode escapes every slash
            text = text.replace("/", "\\/")
    out, n = redact(text, PATTERNS)
    assert n == 1 and "hunter2" not in out
    inner = json.loads(out)
    for _ in range(levels - 1):
        inner = json.loads(inner["l"])
    assert inner == {"u": f"postgres://app:{REDACTED}@db:5432/x"}


@pytest.mark.parametrize(
    "text",
    ['{"path": "C:\\\\Users\\\\me\\\\token.txt"}', "C:\\\\\\\\server\\\\share", ":\\\\/x"],
)
def test_a_windows_path_after_a_colon_is_kept(text: str) -> None:
    assert redact(text, PATTERNS) == (text, 0)


def test_a_windows_path_in_json_text_holds_no_literal_the_scanner_finds() -> None:
    # JSON text escapes each backslash of a Windows tool's output (``C:\\Users``): a literal
    # ``:\\`` found one on every path, and each cost a regex call.
    text = json.dumps({"output": "C:\\Users\\me\\src\\app.py\nD:\\data\\x.csv"})
    assert scanner_for(PATTERNS).find(text) == {}
