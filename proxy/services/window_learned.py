"""What a session learns when the provider refuses its prompt as too long for the window.

The refusal is relayed to the client as it came (the client decides whether to retry); the
proxy only learns from it that its estimate of the session's prompts is too low, and raises
the session's calibration (``tokens.learned_ratio``), which the turn's last statement stores
(``Turn.abort``). The guard counts with that ratio, so the same history sent again is
trimmed below the limit instead of being refused the same way again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from proxy.cascade.tokens import learned_ratio
from proxy.cascade.types import Message
from proxy.cascade.window_refusal import window_refusal
from proxy.provider_errors import provider_name
from proxy.services.budget import reserved_output
from proxy.services.request import Step

__all__ = ["learned"]

log = logging.getLogger("cascade.forward")


def learned(
    step: Step, status: int, body: bytes | memoryview | str | None, messages: Sequence[Message]
) -> float | None:
    """The session's raised calibration when ``body`` (an error answer of ``status`` to the
    prompt of ``messages``, or a stream's error object's type and code; None for no error)
    refuses that prompt as too long, else None (nothing to raise, the ratio at its cap). Logs
    what it learned, and a window the provider states below the configured ``contextLimit``
    (which no ratio fixes: the guard fits prompts to the configured one). Never raises: the
    callers end the turn and relay the error after it, and learning is not worth either."""
    try:
        return _learned(step, status, body, messages)
    except Exception as exc:  # the error is relayed and the lease freed all the same
        log.warning(
            "could not read what %s's error answer for session %s teaches: %s",
            provider_name(step.route.provider),
            step.ctx.session_id,
            type(exc).__name__,
        )
        return None


def _learned(
    step: Step, status: int, body: bytes | memoryview | str | None, messages: Sequence[Message]
) -> float | None:
    text = body if isinstance(body, str) else bytes(body or b"")
    refusal = window_refusal(status, text, messages)
    if refusal is None:
        return None
    limits = step.route.limits
    sent = step.count(messages)
    estimate = sent + step.overhead  # as the provider counts it
    budget = limits.context_limit - reserved_output(step.body, limits)
    old = float(step.state.session["calibration"])
    # the guard counts the messages at the ratio against the room the tools leave, their
    # tokens set aside unscaled: so the ratio is learnt on the messages' share alone
    shares = refusal.told - step.overhead if refusal.told is not None else None
    new = learned_ratio(old, estimate=sent, budget=budget - step.overhead, told=shares)
    where = provider_name(step.route.provider)
    told = f"{refusal.told} tokens by its count" if refusal.told else "its count not given"
    change = (
        f"goes from {old:.3g} to {new:.3g}, so the guard trims it next time"
        if new > old
        else f"stays at {old:.3g} (at its cap, or counting this prompt past the window already)"
    )
    log.warning(
        "%s refused a prompt of session %s as too long for the window (%s, estimated %d); "
        "the session's calibration %s",
        where,
        step.ctx.session_id,
        told,
        estimate,
        change,
    )
    if refusal.window is not None and refusal.window < limits.context_limit:
        log.warning(
            "%s states a window of %d tokens for model %s, below its contextLimit %d in "
            "config: set contextLimit to at most %d",
            where,
            refusal.window,
            step.route.model,
            limits.context_limit,
            refusal.window,
        )
    return new if new > old else None
