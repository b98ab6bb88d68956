from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from proxy.logs import masked
from proxy.session_id import (
    SESSION_ID_RE,
    InvalidSessionId,
    derive_session_id,
    header_value,
    named_session_id,
    query_credential,
    resolve_session_id,
    strip_proxy_fields,
    tenant_from_bearer,
    validate_session_id,
)


def body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), **extra}


def resolve(*, path_id: str | None = None, header_id: str | None = None, b: Any = None) -> str:
    return resolve_session_id(path_id=path_id, header_id=header_id, body=b, tenant="t", agent="a")


def auto(*parts: str) -> str:
    return "auto-" + hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]


SYS = {"role": "system", "content": "be brief"}
USR = {"role": "user", "content": "hello"}


# validation


@pytest.mark.parametrize("value", ["a", "A.b_c:d-9", "x" * 128, "auto-0123", "...", ".a", "a.."])
def test_validate_accepts_allowed_ids(value: str) -> None:
    assert validate_session_id(value) == value


@pytest.mark.parametrize("value", ["", "x" * 129, "a b", "a/b", "é", "a\n", ".", ".."])
def test_validate_rejects_other_ids(value: str) -> None:
    with pytest.raises(InvalidSessionId, match="1 to 128 characters"):
        validate_session_id(value)


def test_invalid_session_id_is_value_error_naming_source() -> None:
    with pytest.raises(ValueError, match="X-Session-Id"):
        resolve(header_id="bad id")


def test_regex_is_used_with_fullmatch() -> None:
    assert SESSION_ID_RE.fullmatch("ok") and not SESSION_ID_RE.fullmatch("ok!")


# resolution order


def test_path_wins_over_header_and_body() -> None:
    b = body(USR, metadata={"session_id": "m"})
    assert resolve(path_id="p", header_id="h", b=b) == "p"


def test_header_wins_over_body() -> None:
    assert resolve(header_id="h", b=body(USR, metadata={"session_id": "m"})) == "h"


def test_body_metadata_used_when_no_path_or_header() -> None:
    assert resolve(b=body(USR, metadata={"session_id": "m"})) == "m"


def test_invalid_path_id_does_not_fall_through() -> None:
    with pytest.raises(InvalidSessionId):
        resolve(path_id="a b", header_id="h")


@pytest.mark.parametrize("value", [123, ["x"], {"a": 1}, ""])
def test_non_string_or_empty_metadata_id_is_invalid(value: Any) -> None:
    with pytest.raises(InvalidSessionId, match="metadata.session_id"):
        resolve(b=body(USR, metadata={"session_id": value}))


@pytest.mark.parametrize("metadata", [None, "x", [1], {}, {"session_id": None}])
def test_unusable_metadata_falls_back_to_derived(metadata: Any) -> None:
    assert resolve(b=body(SYS, USR, metadata=metadata)) == auto("t", "a", "be brief", "hello")


# derived ids


def test_derived_id_hashes_tenant_agent_system_and_user() -> None:
    assert resolve(b=body(SYS, USR)) == auto("t", "a", "be brief", "hello")


def test_derived_id_uses_first_system_and_first_user_only() -> None:
    later = body(SYS, USR, {"role": "assistant", "content": "x"}, {"role": "user", "content": "2"})
    assert resolve(b=later) == resolve(b=body(SYS, USR))


def test_derived_id_accepts_developer_as_system() -> None:
    dev = {"role": "developer", "content": "be brief"}
    assert resolve(b=body(dev, USR)) == resolve(b=body(SYS, USR))


def test_derived_id_canonicalises_content_parts() -> None:
    parts = [{"type": "text", "text": "hello"}]
    reordered = [{"text": "hello", "type": "text"}]
    b1 = body({"role": "user", "content": parts})
    b2 = body({"role": "user", "content": reordered})
    assert resolve(b=b1) == resolve(b=b2) == auto("t", "a", "", json.dumps(parts, sort_keys=True))


def test_derived_id_depends_on_tenant_and_agent() -> None:
    b = body(SYS, USR)
    ids = {derive_session_id(body=b, tenant=t, agent=a) for t in ("t1", "t2") for a in ("a1", "a2")}
    assert len(ids) == 4


def test_derived_id_without_body_or_messages() -> None:
    assert resolve(b=None) == auto("t", "a", "", "")
    assert resolve(b={"messages": "nope"}) == auto("t", "a", "", "")


def test_derived_id_is_itself_valid() -> None:
    assert validate_session_id(resolve(b=body(SYS, USR)))


# strip_proxy_fields


def test_strip_removes_session_id_and_empty_metadata() -> None:
    b = body(USR, metadata={"session_id": "s"})
    assert strip_proxy_fields(b) == body(USR)
    assert b["metadata"] == {"session_id": "s"}  # input untouched


def test_strip_keeps_other_metadata() -> None:
    b = body(USR, metadata={"session_id": "s", "user": "u"})
    assert strip_proxy_fields(b) == body(USR, metadata={"user": "u"})


@pytest.mark.parametrize("metadata", [{}, {"user": "u"}, "x"])
def test_strip_leaves_metadata_without_session_id_alone(metadata: Any) -> None:
    b = body(USR, metadata=metadata, temperature=0.2, unknown_field=[1])
    assert strip_proxy_fields(b) == b


# tenants


def test_tenant_from_bearer_hashes_token() -> None:
    expected = "t-" + hashlib.sha256(b"sk-abc").hexdigest()[:24]
    assert tenant_from_bearer("Bearer sk-abc") == expected
    assert tenant_from_bearer("bearer  sk-abc ") == expected


def test_tenant_differs_per_token() -> None:
    assert tenant_from_bearer("Bearer a") != tenant_from_bearer("Bearer b")


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer   "])
def test_tenant_anonymous_without_token(header: str | None) -> None:
    assert tenant_from_bearer(header) == "anonymous"


def test_tenant_from_non_bearer_header_hashes_whole_value() -> None:
    expected = "t-" + hashlib.sha256(b"Basic xyz").hexdigest()[:24]
    assert tenant_from_bearer("Basic xyz") == expected


def test_tenant_from_a_query_key_without_a_bearer_token() -> None:
    """A credential in the query (a parameter named as one: ``credentials.sent_secrets``) is the
    tenant when no bearer token is sent: the same tenant as that key sent as a bearer; beside
    another bearer token, the two together are."""
    by_bearer = tenant_from_bearer("Bearer sk-one")
    for name in ("key", "API-Key", "api_key", "access_token", "sig", "code"):
        assert tenant_from_bearer(None, [("api-version", "1"), (name, " sk-one ")]) == by_bearer
        assert tenant_from_bearer("Bearer  ", [(name, "sk-one")]) == by_bearer
    assert tenant_from_bearer("Bearer sk-two", [("key", "sk-one")]) != by_bearer
    assert tenant_from_bearer(None, [("key", ""), ("key", "sk-one")]) == by_bearer
    both = tenant_from_bearer(None, [("sig", "sk-one"), ("key", "sk-two")])
    assert both not in (by_bearer, tenant_from_bearer("Bearer sk-two"), "anonymous")
    assert tenant_from_bearer(None, [("api-version", "sk-one"), ("country_code", "x")]) == (
        "anonymous"
    )


def test_a_placeholder_bearer_beside_a_query_key_is_not_the_tenant_alone() -> None:
    """Regression: a client whose SDK needs an ``api_key`` sends a placeholder bearer
    (``EMPTY``) and pays with a key in the query; the bearer alone was its tenant, one that
    every such client shared. Every credential the request carries is its tenant together,
    each once: the same key sent both ways is the tenant of that key alone."""
    one = tenant_from_bearer("Bearer EMPTY", [("key", "sk-one")])
    two = tenant_from_bearer("Bearer EMPTY", [("key", "sk-two")])
    assert one != two
    assert tenant_from_bearer("Bearer EMPTY") not in (one, two)
    assert tenant_from_bearer("Bearer sk-one", [("key", "sk-one")]) == tenant_from_bearer(
        "Bearer sk-one"
    )
    assert tenant_from_bearer("Bearer sk-one", [("key", "sk-two")]) not in (
        tenant_from_bearer("Bearer sk-one"),
        tenant_from_bearer("Bearer sk-two"),
    )


def test_query_parameters_named_like_a_credential_only_by_a_part_of_a_word_are_not_one() -> None:
    """A name holds a credential's word as a word of its own (``api_key``, ``apiKey``,
    ``X-Amz-Signature``, ``subscription-key``, ``authkey``), not inside another word
    (``max_tokens``, ``author``, ``design``, ``passage``, ``keyword``, ``credit``): those are
    no credential, and a value that changes per request would make each request a tenant."""
    took = ("api_key", "apiKey", "X-Amz-Signature", "subscription-key", "authkey", "Code")
    for name in (*took, "passcode", "basicauth", "clientCredentials", "sessiontoken"):
        assert query_credential([(name, "v")]) == "v", name
        assert "sk-hidden" not in masked(f"GET /v1/chat?{name}=sk-hidden"), name  # nor logged
    for name in ("max_tokens", "author", "design", "passage", "keyword", "credit", "zipcode"):
        assert query_credential([(name, "v")]) == "", name


def test_named_session_id_is_none_only_when_the_client_names_none() -> None:
    plain = {"messages": [{"role": "user", "content": "hi"}]}
    assert named_session_id(path_id=None, header_id=None, body=plain) is None
    assert (
        named_session_id(
            path_id=None, header_id=None, body={**plain, "metadata": {"session_id": None}}
        )
        is None
    )
    assert named_session_id(path_id=None, header_id="h", body=plain) == "h"
    assert (
        named_session_id(
            path_id=None, header_id=None, body={**plain, "metadata": {"session_id": "m"}}
        )
        == "m"
    )
    assert named_session_id(path_id="p", header_id="h", body=plain) == "p"


def test_an_empty_header_is_no_header() -> None:
    """``X-Session-Id:`` with nothing after it (``$RUN`` unset) names no session: the body's
    id, else the derived one, as without the header; it was the 400 ``invalid_session_id``."""
    plain = {"messages": [{"role": "user", "content": "hi"}]}
    assert named_session_id(path_id=None, header_id="", body=plain) is None
    named = {**plain, "metadata": {"session_id": "m"}}
    assert named_session_id(path_id=None, header_id="", body=named) == "m"
    assert resolve(header_id="", b=body(SYS, USR)) == auto("t", "a", "be brief", "hello")


@pytest.mark.parametrize(
    ("asgi", "written"),
    [("sess-Ã©", "sess-é"), ("plain", "plain"), ("bad-ÿ", b"bad-\xff"), ("€", "€")],
)
def test_header_value_is_what_the_client_wrote(asgi: str, written: str | bytes) -> None:
    """ASGI's Latin-1 reading of a header undone: UTF-8 text, else bytes; a str beyond
    Latin-1 (never from a header's bytes) unchanged."""
    assert header_value(asgi) == written


@pytest.mark.parametrize(
    ("authorization", "query", "api_keys", "tenant"),
    [
        ("Bearer sk-client-0123456789abcdef", (), (), "t-87a46465aa3bec8570e0cfcf"),
        ("sk-raw-0123456789abcdef", (), (), "t-1ecd4c3f1edeef09223d7360"),
        (None, (), ("azure-0123456789abcdef",), "t-ffde4ba6c839a563a06319d7"),
        (
            "Bearer sk-client-0123456789abcdef",
            [("api-key", "q-0123456789abcdef")],
            ("azure-0123456789abcdef",),
            "t-6c487dc706d6900b1572e232",
        ),
    ],
)
def test_a_pass_through_tenant_is_the_hash_its_sessions_were_stored_under(
    authorization: str | None,
    query: list[tuple[str, str]],
    api_keys: tuple[str, ...],
    tenant: str,
) -> None:
    """Pinned values: a changed hash would orphan every stored session of its clients (a
    bearer alone, an Azure api-key, both with a query key hash as they always did)."""
    assert tenant_from_bearer(authorization, query, api_keys) == tenant
