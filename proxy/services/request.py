"""A chat request's values in the shell: who sent it and for which session
(``ChatContext``), where it goes (``Route``), and what its step prepared for the provider
call (``Step``).

``ChatService`` makes them (``chat.route`` the route); the ``Turn`` that holds the session
keeps the step, and the Forwarder, the ``/compact`` answer and the budget read them. They
live apart from ``turn.py`` so that what only reads a request need not import the ``Turn``
that holds its session.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.cascade.pipeline import READ_TOOL_SCHEMA, Assembled
from proxy.cascade.tokens import MemoCounter
from proxy.cascade.types import Message
from proxy.config import ModelConfig, ProviderConfig
from proxy.config_context import ContextConfig
from proxy.jsonio import dumps
from proxy.services.client_watch import WAITING, ClientWatch
from proxy.services.compaction import CompactionResult
from proxy.services.history import SessionState
from proxy.services.prep_wait import PrepWait
from proxy.services.system_role import as_user, takes_system
from proxy.session_id import SessionKey, strip_proxy_fields

__all__ = ["ChatContext", "Route", "Step"]


@dataclass(frozen=True, slots=True)
class ChatContext:
    tenant: str
    session_id: str
    headers: Mapping[str, str]
    derived: bool = False  # the id is derived, not the client's: it may move to a lane
    client: ClientWatch | None = None  # whether the client is still there (client_watch.py)
    query: tuple[tuple[str, str], ...] = ()  # the client's query string, for the provider too
    agents: tuple[str, ...] | None = None  # the agents the proxy key may use (None: any)
    keepalive: PrepWait | None = None  # a stream's keep-alive clock, from its acceptance
    # The key's agents under the config in force, as the request takes its session; raises
    # ``Unauthorized`` once a reload revoked the key (``auth.key_in_force``). None: not asked.
    admit: Callable[[], tuple[str, ...] | None] | None = None

    @property
    def key(self) -> SessionKey:
        return SessionKey(self.tenant, self.session_id)

    def check_client(self) -> None:
        """``ClientDisconnected`` when the client was seen to leave while the request waited
        for its session: the provider is not called for nobody."""
        if self.client is not None:
            self.client.check(WAITING)


@dataclass(frozen=True, slots=True)
class Route:
    agent: str
    provider: ProviderConfig
    model: str
    limits: ModelConfig
    ctx: ContextConfig


@dataclass(slots=True)
class Step:
    """What was prepared for the provider call: the state it read and the prompt it built."""

    ctx: ChatContext
    route: Route
    state: SessionState
    assembled: Assembled
    body: dict[str, Any]
    stream: bool
    client_wants_usage: bool
    count: MemoCounter
    command: CompactionResult | None = None
    reclaimed: int = 0  # tokens this step's eviction reclaimed
    overhead: int = 0  # estimated tokens of the tools and schemas sent beside the messages
    turn: tuple[str, str] | None = None  # the turn's key and per-turn values to keep (JSON)

    def upstream_body(self, messages: list[Message], *, usage: bool = True) -> bytes:
        """The body sent upstream for a round's ``messages``: the client's, without the
        proxy's own fields, for the route's model, with ``read_tool_output`` offered when the
        step offers it, and a stream's usage asked for unless ``usage`` is off (a provider
        refusing ``stream_options``, ``usage_option.py``). For a model that takes no system
        message, the proxy's own (the memory block's) goes as a user message
        (``system_role.py``)."""
        body = strip_proxy_fields(self.body)
        body["model"] = self.route.model
        if not takes_system(self.route.model, self.route.limits):  # its memory block
            messages = as_user(messages, self.assembled.injected)
        body["messages"] = messages
        if self.assembled.offer_read_tool:
            body["tools"] = [*(body.get("tools") or []), READ_TOOL_SCHEMA]
        if self.stream and usage:
            so = dict(body.get("stream_options") or {})
            so["include_usage"] = True
            body["stream_options"] = so
        elif self.stream and body.get("stream_options", 0) is None:  # a provider refusing
            del body["stream_options"]  # the field refuses its null too
        return dumps(body)
