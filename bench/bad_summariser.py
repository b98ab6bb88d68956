"""Real transcripts through a real proxy whose fast model misbehaves, one way per summary call.

The replay upstream (``bench/replay_upstream.py``) answers the main model as recorded; each
summary call gets the next behaviour of ``--modes`` in turn (:data:`MODES`): an empty answer,
a body that is no JSON, JSON of another shape, a tool call, a briefing far past its
``max_tokens``, one cut at ``length``, a content filter, a 429, a slow answer (past the
``summarize.timeoutSeconds`` this run sets), a stream nobody asked for (whole, broken off by
an error event, or cut with neither a finish reason nor ``[DONE]``), content as parts, a
refusal, a briefing as a JSON object, every section ``(none)``, or a good briefing. It prints,
per file, the steps over the limit and the broken tool pairings (both must be 0), the client's
errors, and the session's ``context.compaction.*`` events grouped by reason and error::

    python -m bench.bad_summariser --limit 8000 --files 1 2
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from bench import trajectories
from bench.cost import get_tokenizer
from bench.replay_driver import cascade_proxy, replay_cascade
from bench.replay_policies import FAST_MODEL
from bench.replay_upstream import BRIEFING_SECTIONS, ReplayUpstream, build_briefing

__all__ = ["MODES", "BadSummariser", "main"]

MODES = ("empty", "nonjson", "wrongshape", "toolcall", "long", "length", "filter", "429",
         "slow", "stream", "streamerror", "streamcut", "parts", "refusal", "json", "allnone",
         "ok")  # fmt: skip
SLOW_SECONDS = 8.0
TIMEOUT_SECONDS = 5
POLICY = "cascade-default"
_NOTHING = "\n\n".join(f"{h}\n(none)" for h in BRIEFING_SECTIONS)


def _completion(model: str, content: Any, finish: str = "stop", **extra: Any) -> JSONResponse:
    message = {"role": "assistant", "content": content, **extra}
    choice = {"index": 0, "message": message, "finish_reason": finish}
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    body = {"id": "bad", "object": "chat.completion", "created": 0, "model": model}
    return JSONResponse({**body, "choices": [choice], "usage": usage})


async def _frames(text: str, end: str = "done") -> AsyncIterator[bytes]:
    """``text`` streamed in two chunks, then ``[DONE]``; ``end`` ``error``: an error event in
    place of the second chunk; ``cut``: the first chunk alone, then the stream stops."""
    for n, piece in enumerate((text[:50], text[50:])):
        chunk = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        if n and end != "done":
            if end == "cut":
                return
            chunk = {"error": {"message": "upstream connection reset", "type": "server_error"}}
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def _as_json(text: str) -> str:
    sections: dict[str, str] = {}
    for part in text.split("\n## "):
        head, _, body = part.removeprefix("## ").partition("\n")
        sections[head.strip().lower().replace(" & ", "_").replace(" ", "_")] = body.strip()
    return json.dumps(sections)


async def bad_answer(mode: str, model: str, text: str) -> Response:
    """The fast model's answer in ``mode``; ``text`` is a well-formed briefing."""
    if mode == "slow":
        await asyncio.sleep(SLOW_SECONDS)
    answers: dict[str, Callable[[], Response]] = {
        "empty": lambda: _completion(model, ""),
        "nonjson": lambda: Response("<html>oops</html>", media_type="text/html"),
        "wrongshape": lambda: JSONResponse({"choices": [{"text": text}]}),
        "toolcall": lambda: _completion(
            model, None, "tool_calls",
            tool_calls=[{"id": "c1", "type": "function",
                         "function": {"name": "summarise", "arguments": "{}"}}],
        ),  # fmt: skip
        "long": lambda: _completion(model, text + "\n" + "- more padding words here " * 3000),
        "length": lambda: _completion(model, text[: len(text) // 3], "length"),
        "filter": lambda: _completion(model, "", "content_filter"),
        "429": lambda: JSONResponse(
            {"error": {"message": "rate limited", "type": "rate_limit"}},
            status_code=429,
            headers={"retry-after": "1"},
        ),
        "stream": lambda: StreamingResponse(_frames(text), media_type="text/event-stream"),
        "streamerror": lambda: StreamingResponse(
            _frames(text, "error"), media_type="text/event-stream"
        ),
        "streamcut": lambda: StreamingResponse(
            _frames(text, "cut"), media_type="text/event-stream"
        ),
        "parts": lambda: _completion(model, [{"type": "text", "text": text}]),
        "refusal": lambda: _completion(model, None, refusal="I can't help with that."),
        "json": lambda: _completion(model, _as_json(text)),
        "allnone": lambda: _completion(model, _NOTHING),
    }  # fmt: skip
    return answers.get(mode, lambda: _completion(model, text))()


class BadSummariser(ReplayUpstream):
    """The replay upstream with a fast model that answers summary calls per ``modes``."""

    def __init__(self, modes: Iterator[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.modes = modes
        self.served: Counter[str] = Counter()

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        if body.get("model") != self.fast_model or "response_format" in body:
            return await super()._chat(_replayed(request, body))
        mode = next(self.modes)
        self.served[mode] += 1
        self.answer(body)  # logged with the fast calls, as the replay counts them
        return await bad_answer(mode, body["model"], build_briefing(body.get("messages") or []))


def _replayed(request: Request, body: dict[str, Any]) -> Request:
    """``request`` again, its body (already read) readable once more."""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}

    return Request(request.scope, receive)


def compaction_events(base_url: str, key: str, session: str) -> Counter[tuple[str, ...]]:
    """The session's persisted ``context.compaction.*`` events: (name, reason, error head)."""
    seen: Counter[tuple[str, ...]] = Counter()
    headers = {"Authorization": f"Bearer {key}", "Last-Event-ID": "0"}
    url = f"{base_url}/v1/sessions/{session}/events"
    name = ""
    start = time.monotonic()
    try:
        with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(3.0)) as resp:
            for line in resp.iter_lines():
                if line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:") and name.startswith("context.compaction"):
                    data = json.loads(line[5:])
                    error = str(data.get("error") or "")[:90]
                    seen[(name.rsplit(".", 1)[-1], str(data.get("reason") or ""), error)] += 1
                if time.monotonic() - start > 3:
                    break
    except httpx.ReadTimeout:
        pass
    return seen


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bad_summariser", description=__doc__)
    parser.add_argument("--limit", type=int, default=8000)
    parser.add_argument("--files", nargs="+", default=["1"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    args = parser.parse_args(argv)
    tokenizer = get_tokenizer()
    upstream = BadSummariser(
        itertools.cycle(args.modes), fast_model=FAST_MODEL, tokenizer=tokenizer
    )
    context = {"summarize": {"timeoutSeconds": TIMEOUT_SECONDS, "maxAttempts": 2}}
    failed = 0
    with upstream, cascade_proxy(args.limit, POLICY, upstream, context) as proxy:
        for name in args.files:
            tf = trajectories.resolve(name)
            url = f"{proxy.base_url}/v1"
            row = replay_cascade(tf, POLICY, args.limit, tokenizer, base_url=url, upstream=upstream)
            m = row.metrics
            failed += m.over_limit + m.broken_pairings + row.errors
            print(
                f"file {tf.number} at {args.limit}: {m.requests} steps, {m.fast_requests} fast "
                f"calls, peak {m.peak_prompt}, over {m.over_limit}, broken {m.broken_pairings}, "
                f"errors {row.errors}"
            )
            if row.errors:
                print("\n".join(f"  | {ln}" for ln in proxy.log_tail(400).splitlines()
                                 if " 4" in ln and "POST /v1/chat" in ln or "WARNING" in ln
                                 or "ERROR" in ln))  # fmt: skip
            key = f"replay-file-{tf.number}"
            for conv in trajectories.load(tf):
                raw = f"f{tf.number}-{conv.id}-{args.limit // 1000}k-{POLICY}"
                sid = re.sub(r"[^A-Za-z0-9._:-]", "_", raw)[:128]  # as the replay names it
                for event, n in compaction_events(proxy.base_url, key, sid).most_common():
                    print(f"  {n:3d} × {' | '.join(e for e in event if e)}")
    print("summary calls answered:", dict(upstream.served))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
