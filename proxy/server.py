"""``cascade-proxy serve``'s uvicorn server, whose second Ctrl-C quits quietly.

The first Ctrl-C (or SIGTERM) is uvicorn's graceful shutdown: no new connections, the
requests in flight finish, then the lifespan closes. A second Ctrl-C is uvicorn's force
exit: it stops waiting and ends its event loop with those requests still running, and each
task cancelled there, every request's and the lifespan's, logs its cancellation as an error
with a traceback (through ``uvicorn.error``), a screenful that reads like a crash. It is
not one: the user asked to abandon that work. So after a second Ctrl-C the server's error
lines are left out, one line says what was cut, and the exit status is 130 (128 + SIGINT,
what a shell gives an interrupted command). The shutdown is uvicorn's own, unchanged: the
lifespan's cleanup still runs as its task is cancelled (the embedded PostgreSQL is stopped).
"""

from __future__ import annotations

import logging
import signal
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE

__all__ = ["serve", "INTERRUPTED"]

log = logging.getLogger("cascade")

INTERRUPTED = 128 + signal.SIGINT
"""The exit status after a second Ctrl-C."""


def _no_errors(record: logging.LogRecord) -> bool:
    return record.levelno < logging.ERROR


class _Server(uvicorn.Server):
    forced = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self.force_exit and not self.forced:
            self.forced = True
            logging.getLogger("uvicorn.error").addFilter(_no_errors)
            log.warning(
                "interrupted again: quitting now, cutting %d open connection(s)",
                len(self.server_state.connections),
            )


def serve(app: Any, **config: Any) -> int:
    """Run ``app`` under uvicorn (``config``: ``uvicorn.Config``'s arguments) until it stops;
    the exit status: 0, uvicorn's for a failed start (3), or :data:`INTERRUPTED`."""
    server = _Server(uvicorn.Config(app, **config))
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn raises the captured Ctrl-C again once it stopped
        pass
    finally:
        if server.forced:
            logging.getLogger("uvicorn.error").removeFilter(_no_errors)
    if server.forced:
        return INTERRUPTED
    return 0 if server.started else STARTUP_FAILURE
