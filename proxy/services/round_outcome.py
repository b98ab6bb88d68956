"""What one upstream round said, as the relay reads it (``RoundOutcome``), and the ways a
round ends before its body does: an event over the proxy's cap (``capped``, ``ends``), and a
body that breaks off or a provider silent past its ``timeoutSeconds`` (``broke_off``).

The relay (``relay.py``) fills the outcome as it reads; ``Forwarder`` decides from it whether
another round follows and which error frame, if any, ends the client's stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from proxy import answers, chunks, sse
from proxy.answers import size_text
from proxy.errors import UpstreamBadResponse, UpstreamTimeout
from proxy.services.relay_calls import Calls
from proxy.stopping import STOPPED, STOPPED_CODE

__all__ = ["RoundOutcome", "broke_off", "capped", "ends", "stop_ended", "stream_failure"]


@dataclass(slots=True)
class RoundOutcome:
    """What one upstream round said, as the relay read it: its answer (``acc``), its calls,
    and how it ended; ``Forwarder`` decides from it whether another round follows."""

    # a choice's own fields of the provider held to a whole answer's cap, read as it starts
    acc: chunks.StreamAccumulator = field(
        default_factory=lambda: chunks.StreamAccumulator(answers.MAX_ANSWER_BYTES)
    )
    calls: Calls = field(default_factory=Calls)  # which are internal (with read_tool_output)
    saw_done: bool = False
    error: str | None = None  # the stream broke off or stopped short: the relay reports it
    error_code: str | None = UpstreamBadResponse.code  # its error frame's (a timeout's: its own)
    provider_error: str | None = None  # its error's type and code: relayed as it came
    saw_data: bool = False  # any data event at all (a body that is no chat stream has some)
    unstreamed: bool = False  # a whole completion came instead, relayed as its stream
    stopped: bool = False  # the stop's grace ended it (``stopping.py``): no fault of the provider
    # what a provider's error frame passes through before it goes out (its StreamAnswer's)
    scrub: Callable[[str], str] = field(default=lambda text: text, repr=False)

    @property
    def only_internal(self) -> bool:
        return self.calls.only_internal

    @property
    def complete(self) -> bool:
        """Whether the round ended as an answer does: ``[DONE]``, or a finish reason on every
        choice. A provider's error frame and a body that holds no chat chunk (relayed as they
        came) count as ended too; a stream of nothing but comments does not."""
        acc = self.acc
        if self.saw_done or self.provider_error:
            return True
        if not acc.indices:
            return self.saw_data
        return all(acc.finish_reason(i) is not None for i in acc.indices)


def capped(events: list[bytes], splitter: sse.BodySplitter, cap: int) -> str | None:
    """The error for an event over ``cap`` bytes, ended or still open in the splitter, with
    the events before it left in ``events``; None when none is. The round ends there, and
    its caller closes the provider's connection, so no more of it is read or held."""
    over = next((pos for pos, event in enumerate(events) if len(event) > cap), None)
    if over is not None:
        del events[over:]
    elif splitter.pending <= cap:
        return None
    return f"the provider sent a stream event over the proxy's cap of {size_text(cap)}"


def ends(out: RoundOutcome, over: str | None) -> bool:
    """Whether the round ends after this read: an error, or an event over the cap, which is
    the round's error unless ``[DONE]`` came before it (the answer is whole)."""
    if over and not (out.error or out.saw_done):
        out.error = over
    return bool(out.error or over)


def broke_off(exc: Exception, out: RoundOutcome) -> None:
    """A body that broke off, or a provider silent past its ``timeoutSeconds``."""
    out.error = f"the provider's stream broke off ({type(exc).__name__})"
    if isinstance(exc, httpx.TimeoutException):
        out.error_code = UpstreamTimeout.code


def stop_ended(out: RoundOutcome) -> None:
    """A round the stop's grace ended (``stopping.StopClock``): the client's stream ends
    with the stop's error frame, and the turn is stored as for a stream that broke off."""
    out.error = STOPPED
    out.error_code = STOPPED_CODE
    out.stopped = True


def stream_failure(out: RoundOutcome) -> str:
    """How a round whose status was a success failed, as its call's ``error.type`` and
    ``cascade_upstream_errors_total`` name it: ``error_answer`` for the provider's own error
    event, ``UpstreamBadResponse`` for a stream cut short, malformed or over the cap (a break
    is its exception's type, which the answer already holds)."""
    return "error_answer" if out.provider_error else UpstreamBadResponse.__name__
