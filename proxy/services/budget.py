"""Budget accounting for a step: what the prompt may hold, and how full the window is.

A provider counts more than the messages against the window: the request's ``tools`` array
(or legacy ``functions``), a ``response_format`` JSON schema (the model is shown it) and,
when the proxy may offer it (``persistRaw``, and a request that can carry it:
``toolloop.carries_tools``), ``read_tool_output``'s schema. Those ``fixed`` tokens are
set aside beside the reserved output, and counted into the occupancy the cascade reacts to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from proxy.cascade.overflow import calibrated_count
from proxy.cascade.pipeline import READ_TOOL_SCHEMA
from proxy.cascade.pressure import Pressure
from proxy.cascade.tokens import effective_input_tokens
from proxy.cascade.types import Budget, Message
from proxy.config import ModelConfig
from proxy.jsonio import dumps
from proxy.services.toolloop import carries_tools

if TYPE_CHECKING:
    from proxy.services.history import SessionState
    from proxy.services.request import Route, Step

__all__ = [
    "FixedTokens",
    "reserved_output",
    "occupancy",
    "pressure",
    "sent_pressure",
    "budget",
    "page_room",
]

_TOOLS_CACHE_MAX = 256


def reserved_output(body: Mapping[str, Any], limits: ModelConfig) -> int:
    """The output the request reserves (``max_completion_tokens``/``max_tokens``), else the
    model's default."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        # a whole float (100.0) is the count it writes (chat_body.is_count), as JSON reads it
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return int(value)
    return limits.reserved_output


class FixedTokens:
    """Tokens a prompt carries besides its messages. Agents send the same ``tools`` array
    (and response schema) every turn, so each one's count is cached by its JSON."""

    def __init__(self, cost: Callable[[Message], int]) -> None:
        self.cost = cost
        self._tools: dict[bytes, int] = {}
        self.schema = self._json_tokens(dumps([READ_TOOL_SCHEMA]))

    def _json_tokens(self, tools_json: bytes) -> int:
        return self.cost({"role": "system", "content": tools_json.decode()})

    def _cached(self, value: Any) -> int:
        key = dumps(value)
        cost = self._tools.get(key, -1)
        if cost < 0:
            if len(self._tools) >= _TOOLS_CACHE_MAX:
                self._tools.clear()
            cost = self._tools[key] = self._json_tokens(key)
        return cost

    def of(self, rt: Route, body: Mapping[str, Any]) -> tuple[int, int]:
        """(the request's tools, legacy functions and response schema; read_tool_output's
        schema when the proxy may offer it)."""
        fmt = body.get("response_format")
        declared = (
            body.get("tools"),
            body.get("functions"),
            fmt.get("json_schema") if isinstance(fmt, Mapping) else None,
        )
        cost = sum(self._cached(v) for v in declared if isinstance(v, list | dict) and v)
        return cost, self.schema if rt.ctx.tool_output.persist_raw and carries_tools(
            body, rt.ctx
        ) else 0


def occupancy(state: SessionState, fixed: int) -> int:
    """Occupancy of the prompt this state would send: the window with its summary folded,
    and the ``fixed`` tokens of its tools.

    ``last_estimate`` counted the folded summary and the tools, so the current estimate
    must too, or every step after a compaction under-reports occupancy by the summary's
    size, and the tools would count only through the calibration ratio (capped at 2).
    """
    return _calibrated(state, state.estimate + fixed)


def _calibrated(state: SessionState, estimate: int) -> int:
    """Occupancy of a prompt estimated at ``estimate`` (its tools included), moved from the
    provider's real count of the session's previous prompt (``effective_input_tokens``)."""
    row = state.session
    return effective_input_tokens(
        estimate,
        ratio=row["calibration"],
        last_real=row["last_prompt_tokens"],
        last_estimate=row["last_estimate"],
    )


def pressure(state: SessionState, rt: Route, body: Mapping[str, Any], fixed: int) -> Pressure:
    """The measure ``cascade.pressure.compaction_need`` decides on."""
    limit = rt.limits.context_limit
    return Pressure(
        occupancy=occupancy(state, fixed),
        estimate=state.estimate,
        limit=limit,
        room=limit - reserved_output(body, rt.limits) - fixed,
    )


def sent_pressure(state: SessionState, rt: Route, body: Mapping[str, Any], sent: int) -> Pressure:
    """The measure of the prompt the step sends: ``sent`` is its estimate with the tools it
    carries (the assembled prompt's, as the step stores it in ``last_estimate``), so this
    window's evictions, trims and compaction are counted out; the handoff nudge reads it."""
    limit = rt.limits.context_limit
    return Pressure(
        occupancy=_calibrated(state, sent),
        estimate=sent,
        limit=limit,
        room=limit - reserved_output(body, rt.limits),
    )


def budget(state: SessionState, rt: Route, body: Mapping[str, Any], fixed: int) -> Budget:
    """The step's budget: the tools are not messages the stages can shed, so their tokens
    are set aside beside the output's."""
    return Budget(
        limit=rt.limits.context_limit,
        reserved_output=reserved_output(body, rt.limits) + fixed,
        occupancy=occupancy(state, fixed),
        fixed=fixed,
    )


def page_room(step: Step, messages: Sequence[Message]) -> tuple[int, Callable[[Message], int]]:
    """The tokens an internal round may add to ``messages`` (the step's prompt and the
    model's ``read_tool_output`` call), and the cost of a message added, both counted as
    the overflow guard counts (``calibrated_count`` with the session's calibration): the
    step's prompt was fitted to the window less the reserved output and the tools, and the
    round's prompt is sent to the same window."""
    cost = calibrated_count(step.count, float(step.state.session["calibration"]))
    limits = step.route.limits
    window = limits.context_limit - reserved_output(step.body, limits) - step.overhead
    return window - cost(messages), lambda msg: cost([msg])
