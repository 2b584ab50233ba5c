"""User-facing errors: one line naming the problem and the fix, exit code 2, no traceback."""


class UserError(Exception):
    exit_code = 2


class BackendRequestError(Exception):
    """A single request failed; the run continues (see the runner's error policy)."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind  # e.g. connect, timeout, http_4xx, http_5xx, protocol, engine, cancelled
        self.message = message
        self.status = status


class BackendStartError(Exception):
    """The engine/server could not be started; message is one line naming cause and fix."""


