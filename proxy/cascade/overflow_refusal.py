"""The refusal of a prompt the overflow guard cannot make fit (``overflow.guard``): what it
needs against what the model's window leaves for it, and its largest message, named as the
client can find it in the list it sent, so a person knows what to shorten.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.cascade.types import LEADING_ROLES, ContextLengthExceeded, Message, TokenCounter

__all__ = ["refusal"]


def _largest(messages: Sequence[Message], count: TokenCounter) -> tuple[int, int]:
    sizes = [count([m]) for m in messages]
    index = max(range(len(sizes)), key=sizes.__getitem__)
    return index, sizes[index]


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _which(
    messages: Sequence[Message], index: int, head: int, positions: Sequence[int] = ()
) -> str:
    """Message ``index`` of the prompt as the client can find it in the list it sent. The
    prompt is not that list (a summary stands for the folded messages, a ``<memory>``
    system message may lead), so its index would name another message; past the protected
    head both lists end alike, so it is counted from the end: by ``positions`` (each
    message's place in the client's list, aligned at the end) when known, since rounds an
    earlier step trimmed for good are gone from the prompt but not from the list (an agent
    loop's task stays before them)."""
    role = messages[index].get("role")
    if index >= head:
        back = len(messages) - index
        if len(positions) >= back:
            back = positions[-1] - positions[-back] + 1
        where = "the last message" if back == 1 else f"the {_ordinal(back)} message from the end"
        return f"{where}, role {role}"
    if role in LEADING_ROLES:
        return f"a {role} message"
    return "the first user message, which carries the conversation summary"


def refusal(
    messages: Sequence[Message],
    *,
    count: TokenCounter,
    needed: int,
    limit: int,
    reserved: int,
    head: int,
    fixed: int = 0,
    assembled: int = 0,
    positions: Sequence[int] = (),
) -> ContextLengthExceeded:
    """The refusal: ``needed`` is what would be sent after every stage (the droppable history
    and blocks gone), ``assembled`` the prompt as the stages built it, named when larger."""
    budget, output = limit - reserved, reserved - fixed
    aside = f"reserved for output {output}"
    if fixed > 0:
        aside += f" and for the tools {fixed}"
    text = (
        f"This request needs about {needed} tokens but {max(budget, 0)} are available for the "
        f"prompt (limit {limit}, {aside})."
    )
    if assembled > needed:
        text += (
            " That counts it after every stage, with every older message the proxy may drop"
            f" gone; the prompt as assembled is {assembled}."
        )
    if output >= limit:  # no prompt fits: shortening one, or a new session, cannot help
        text += (
            f" The output reserved ({output}) alone fills the window (limit {limit}): lower"
            " max_tokens / max_completion_tokens (the model's reservedOutput when the request"
            " sets neither), or raise the model's contextLimit."
        )
    elif budget <= 0:  # the tools take the rest: no prompt fits either
        text += (
            f" The output reserved ({output}) and the tools ({fixed}) fill the window (limit"
            f" {limit}): lower max_tokens / max_completion_tokens, send fewer tools, or raise"
            " the model's contextLimit."
        )
    elif messages:
        index, size = _largest(messages, count)
        text += (
            f" The largest message ({_which(messages, index, head, positions)}) alone is {size}"
            " tokens; "
            "shorten it, or start a new session / raise the model's contextLimit"
            " (or lower the reserved output, e.g. max_tokens)."
        )
    else:
        text += " Raise the model's contextLimit or lower the reserved output (max_tokens)."
    return ContextLengthExceeded(text)
