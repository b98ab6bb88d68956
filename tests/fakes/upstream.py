"""A scriptable fake OpenAI-compatible upstream, served over real loopback HTTP.

The fake is a raw ASGI app run by uvicorn in a background thread on ``127.0.0.1`` with an
OS-chosen port (httpx's ``TestServer`` + ``serve_in_thread`` pattern). Tests queue responses
(built with tests.fakes.replies) with :meth:`FakeUpstream.script`; each chat request pops the
next one (FIFO) and an empty queue falls back to :attr:`FakeUpstream.default`, which echoes
``"ok"``. tests.fakes.rendering turns each into what goes on the wire; this module serves it,
with its delays, resets and disconnects, and records every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

import uvicorn

from tests.fakes.rendering import (
    DEFAULT_MODELS,
    Rendered,
    _embeddings_json,
    _models_json,
    embeddings_refusal,
    render,
)
from tests.fakes.replies import Pacer, RecordedRequest, Reply, Responder, _error_body, error

__all__ = [
    "CHAT",
    "EMBEDDINGS",
    "MODELS",
    "FakeUpstream",
]

CHAT = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"
MODELS = "/v1/models"


class _Server(uvicorn.Server):
    """uvicorn for a background thread: stops at once and cancels in-flight requests."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await super().serve(sockets)

    async def main_loop(self) -> None:
        # uvicorn polls should_exit every 100 ms; an event makes close() immediate.
        await self.on_tick(0)
        assert self._stop is not None
        await self._stop.wait()

    async def shutdown(self, sockets: Any = None) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        tasks = list(self.server_state.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        self.should_exit = True
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                self._loop.call_soon_threadsafe(self._stop.set)


class _ResetError(Exception):
    """Raised when the connection to reset cannot be found; uvicorn then drops it."""


async def _read_request(scope: Mapping[str, Any], receive: Callable[[], Any]) -> RecordedRequest:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    content = b"".join(chunks)
    try:
        parsed = json.loads(content) if content else None
    except ValueError:
        parsed = None
    headers: dict[str, str] = {}
    for k, v in scope["headers"]:
        name = k.decode("latin-1").lower()
        value = v.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return RecordedRequest(
        method=scope["method"],
        path=scope["path"],
        query=scope.get("query_string", b"").decode("latin-1"),
        headers=headers,
        json=parsed,
        content=content,
    )


class FakeUpstream:
    """A real HTTP server on 127.0.0.1 that speaks enough OpenAI for the proxy's tests.

    Routes: ``POST /v1/chat/completions`` (scripted, else :attr:`default`), ``GET /v1/models``,
    ``POST /v1/embeddings`` (deterministic vectors, float or base64). :meth:`script` with
    ``endpoint=`` overrides any path, e.g. a 500 for ``/v1/models``. Every request is recorded.
    """

    def __init__(
        self,
        *,
        models: Sequence[str] = DEFAULT_MODELS,
        embedding_dim: int = 8,
        tls: tuple[str, str] | None = None,
    ) -> None:
        """``tls``: (certificate file, key file) to serve HTTPS instead of HTTP."""
        self.tls = tls
        self.models = tuple(models)
        self.embedding_dim = embedding_dim
        self.default: Responder = Reply()
        self._cond = threading.Condition()
        self._requests: list[RecordedRequest] = []
        self._disconnects: list[int] = []
        self._open = 0  # responses being delivered
        self._queues: dict[str, deque[Responder]] = {}
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._port = 0
        self.validator: Callable[[Any], list[str]] | None = None
        """Checks each chat body (e.g. :func:`tests.fakes.strict_openai.violations`): one with
        problems gets OpenAI's 400 and is listed in :attr:`violations`."""
        self.violations: list[tuple[int, list[str]]] = []

    # -- lifecycle

    def start(self) -> FakeUpstream:
        config = uvicorn.Config(
            self,
            host="127.0.0.1",
            port=0,
            interface="asgi3",
            http="h11",
            ws="none",
            lifespan="off",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            ssl_certfile=self.tls[0] if self.tls else None,
            ssl_keyfile=self.tls[1] if self.tls else None,
        )
        server = _Server(config)
        thread = threading.Thread(target=server.run, name="fake-upstream", daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError("fake upstream did not start")
            time.sleep(0.001)
        self._server, self._thread = server, thread
        self._port = server.servers[0].sockets[0].getsockname()[1]
        return self

    def close(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.stop()
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> FakeUpstream:
        return self.start() if self._server is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- test-facing API (main thread)

    @property
    def origin(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """Base URL for OpenAI clients, ending in ``/v1``."""
        return f"{self.origin}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._cond:
            return list(self._requests)

    def bodies(self, path: str = CHAT) -> list[Any]:
        """Parsed JSON bodies of the requests to ``path``."""
        return [r.json for r in self.requests if r.path == path]

    @property
    def disconnects(self) -> list[int]:
        """Indexes (into :attr:`requests`) whose client hung up before the response ended."""
        with self._cond:
            return list(self._disconnects)

    @property
    def open_responses(self) -> int:
        """Responses still being delivered (a stream the client has not read to the end)."""
        with self._cond:
            return self._open

    def script(self, *responses: Responder, endpoint: str = CHAT) -> None:
        """Queue responses for ``endpoint``; each request there pops one, first in first out."""
        with self._cond:
            self._queues.setdefault(endpoint, deque()).extend(responses)

    def pending(self, endpoint: str = CHAT) -> int:
        """How many scripted responses for ``endpoint`` are still unused."""
        with self._cond:
            return len(self._queues.get(endpoint, ()))

    def wait_for_requests(self, n: int, timeout: float = 20.0) -> list[RecordedRequest]:
        """Block until at least ``n`` requests arrived (for work the proxy does off-path)."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._requests) >= n, timeout):
                raise TimeoutError(f"expected {n} requests, got {len(self._requests)}")
            return list(self._requests)

    # -- server side (uvicorn thread)

    def _record(self, request: RecordedRequest) -> tuple[int, Responder]:
        with self._cond:
            seq = len(self._requests)
            self._requests.append(request)
            self._cond.notify_all()
            problems = self._check(request)
            if problems:
                self.violations.append((seq, problems))
                msg = "; ".join(problems)
                return seq, error(400, _error_body(msg, "invalid_request_error", None))
            queue = self._queues.get(request.path)
            if queue:
                return seq, queue.popleft()
        return seq, self._default_for(request)

    def _check(self, request: RecordedRequest) -> list[str]:
        if self.validator is None or request.path != CHAT or request.method != "POST":
            return []
        return self.validator(request.json)

    def _default_for(self, request: RecordedRequest) -> Responder:
        body = request.json if isinstance(request.json, Mapping) else None
        if request.path == CHAT and request.method == "POST":
            if body is None:
                return error(400, _error_body("body must be JSON", "invalid_request_error", None))
            return self.default
        if request.path == MODELS and request.method == "GET":
            return _models_json(self.models)
        if request.path == EMBEDDINGS and request.method == "POST" and body is not None:
            if (refused := embeddings_refusal(body)) is not None:
                return error(400, refused)
            return _embeddings_json(body, self.embedding_dim)
        msg = f"fake upstream has no route {request.method} {request.path}"
        return error(404, _error_body(msg, "invalid_request_error", "unknown_url"))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = await _read_request(scope, receive)
        seq, responder = self._record(request)
        rendered = render(responder, request, seq)

        async def until_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        watcher = asyncio.ensure_future(until_disconnect())
        with self._cond:
            self._open += 1
        try:
            if not await self._deliver(rendered, scope, send, watcher):
                with self._cond:
                    self._disconnects.append(seq)
        finally:
            watcher.cancel()
            with self._cond:
                self._open -= 1

    async def _deliver(
        self, r: Rendered, scope: Any, send: Any, watcher: asyncio.Future[None]
    ) -> bool:
        """Send ``r``; False when the client disconnected first."""
        if r.first_byte_delay and await _client_left(watcher, r.first_byte_delay):
            return False
        if r.pacer is not None and r.pacer.first:
            allowed = await _paced(r.pacer, 0, watcher)
            if allowed is None:
                return False
            if not allowed:
                await send({"type": "http.response.start", "status": 504, "headers": []})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return True
        headers = dict(r.headers)
        if "event-stream" not in headers.get("content-type", "") and r.reset_after is None:
            headers.setdefault("content-length", str(len(r.body)))
        raw_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        await send({"type": "http.response.start", "status": r.status, "headers": raw_headers})
        if r.first_token_delay and await _client_left(watcher, r.first_token_delay):
            return False
        for i, frame in enumerate(r.frames):
            if r.reset_after is not None and i >= r.reset_after:
                await self._reset(scope, watcher)
                return True
            if i and r.chunk_delay and await _client_left(watcher, r.chunk_delay):
                return False
            if i and r.pacer is not None:
                allowed = await _paced(r.pacer, i, watcher)
                if allowed is None:
                    return False
                if not allowed:
                    break
            if watcher.done():
                return False
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return True

    async def _reset(self, scope: Any, watcher: asyncio.Future[None]) -> None:
        # Close the socket under uvicorn (after flushing what was sent), so the client sees
        # the body end early with no [DONE]; uvicorn logs nothing for a disconnected cycle.
        assert self._server is not None
        for protocol in list(self._server.server_state.connections):
            if getattr(protocol, "client", None) == scope.get("client"):
                protocol.transport.close()
                await asyncio.wait({watcher}, timeout=1.0)
                return
        raise _ResetError("connection to reset not found")


async def _paced(pacer: Pacer, frame: int, watcher: asyncio.Future[None]) -> bool | None:
    """Wait until ``pacer`` allows ``frame``: True when it does, False when its patience ran
    out first (marked expired), None when the client disconnected meanwhile."""
    deadline = time.monotonic() + pacer.patience
    while not pacer.allows(frame):
        if time.monotonic() > deadline:
            pacer.expired = True
            return False
        if await _client_left(watcher, 0.01):
            return None
    return True


async def _client_left(watcher: asyncio.Future[None], delay: float) -> bool:
    """Sleep ``delay`` seconds, returning early (True) if the client disconnects."""
    done, _ = await asyncio.wait({watcher}, timeout=delay)
    return bool(done)
