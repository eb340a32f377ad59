"""The errors the client raises.

Every error is an `EvstoreError`. Errors the daemon answers with carry its JSON-RPC
`code`, its stable `reason` (the `data.reason` of the response: switch on it, or catch
the subclass) and its `message`, a sentence meant for a person. Errors of the connection
itself (`Unreachable`, `ConnectionLost`, `Timeout`) are also `ConnectionError`s and have
no code.
"""
from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
    "EvstoreError",
    "NotFound",
    "Conflict",
    "Deleted",
    "TooLarge",
    "InvalidEvent",
    "InvalidTransition",
    "StorageFull",
    "Unavailable",
    "Forbidden",
    "Corrupt",
    "ParseError",
    "InvalidRequest",
    "MethodNotFound",
    "InvalidParams",
    "InternalError",
    "WatchOverflow",
    "ProtocolError",
    "EvstoreConnectionError",
    "Unreachable",
    "ConnectionLost",
    "Timeout",
    "error_from_response",
]


class EvstoreError(Exception):
    """Base of every error of the client.

    Attributes:
        message: what went wrong, a sentence for a person (also ``str(error)``).
        code: the JSON-RPC error code the daemon sent, or None for errors found by the
            client (a connection that failed, a reply it cannot read).
        reason: a stable machine reason: the daemon's ``data.reason`` (``not_found``,
            ``conflict``, ``deleted``, ``too_large``, ``invalid_event``,
            ``storage_full``, ``unavailable``, ``forbidden``, ``corrupt`` and the
            JSON-RPC ones: ``parse_error``, ``invalid_request``, ``method_not_found``,
            ``invalid_params``, ``internal``), or the client's own (``unreachable``,
            ``connection_lost``, ``timeout``, ``protocol``, ``too_far_behind``).
        index: for ``append``, the position in the batch of the event that failed
            (``data.index``), else None.
        data: the whole ``data`` member of the daemon's error (empty when none).
    """

    #: The reason an error of this class has when the daemon sends none.
    default_reason: Optional[str] = None

    def __init__(
        self,
        message: str,
        *,
        code: Optional[int] = None,
        reason: Optional[str] = None,
        data: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message: str = message
        self.code: Optional[int] = code
        self.reason: Optional[str] = reason if reason is not None else self.default_reason
        self.data: Dict[str, Any] = dict(data or {})
        index = self.data.get("index")
        self.index: Optional[int] = index if isinstance(index, int) and not isinstance(index, bool) else None

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code!r}, reason={self.reason!r})"


# --- errors the daemon answers with ----------------------------------------------------


class NotFound(EvstoreError):
    """No event of the entity is held on this node (``not_found``, -32001); also an
    unknown peer name, a blob this node does not hold, or a blob upload that is not under
    way on this connection."""

    default_reason = "not_found"


class Conflict(EvstoreError):
    """``if_match`` does not match the entity's rev, a ``restore`` of an entity that
    is not deleted, or a name already taken (``conflict``, -32002). Nothing was written."""

    default_reason = "conflict"


class Deleted(EvstoreError):
    """The entity is deleted: append a ``restore`` first (``deleted``, -32003)."""

    default_reason = "deleted"


class TooLarge(EvstoreError):
    """An event is over the daemon's ``max_event_bytes``, or a blob over its
    ``max_blob_bytes`` (-32004), or a request line is over its ``max_line_bytes``
    (-32600) (``too_large``)."""

    default_reason = "too_large"


class InvalidEvent(EvstoreError):
    """An event breaks the input rules (``invalid_event``, -32005); ``index`` says which
    one of the batch. Nothing was written."""

    default_reason = "invalid_event"


class InvalidTransition(EvstoreError):
    """A status move the daemon's types file does not allow (``invalid_transition``,
    -32014); the message names the rule. Nothing was written."""

    default_reason = "invalid_transition"


class StorageFull(EvstoreError):
    """The disk or the daemon's ``map_max_bytes`` is full (``storage_full``, -32006):
    nothing was written; reads still work. For a blob: the blobs would pass
    ``max_blob_store_bytes``, or leave the disk less than ``blob_reserve_bytes`` free."""

    default_reason = "storage_full"


class Unavailable(EvstoreError):
    """The daemon is stopping, or its storage failed, or it has as many blob uploads under
    way as it takes: retry later (``unavailable``, -32007)."""

    default_reason = "unavailable"


class Forbidden(EvstoreError):
    """The connection's access does not allow the call (``forbidden``, -32008); the
    message says who the client is and which setting would allow it."""

    default_reason = "forbidden"


class Corrupt(EvstoreError):
    """Stored data is unreadable (``corrupt``, -32009)."""

    default_reason = "corrupt"


class ParseError(EvstoreError):
    """The daemon could not parse the request line as JSON (``parse_error``, -32700)."""

    default_reason = "parse_error"


class InvalidRequest(EvstoreError):
    """The line is not a JSON-RPC 2.0 request (``invalid_request``, -32600)."""

    default_reason = "invalid_request"


class MethodNotFound(EvstoreError):
    """No such method (``method_not_found``, -32601)."""

    default_reason = "method_not_found"


class InvalidParams(EvstoreError):
    """Missing, unknown or mistyped parameters (``invalid_params``, -32602)."""

    default_reason = "invalid_params"


class InternalError(EvstoreError):
    """A bug in the daemon (``internal``, -32603): please report it."""

    default_reason = "internal"


class WatchOverflow(EvstoreError):
    """The watch fell too far behind the events being written and the daemon ended it
    (the ``watch.overflow`` notification, reason ``too_far_behind``).

    Watch again with ``after=error.resume_after`` to continue without a gap.

    Attributes:
        resume_after: the seq of the last event queued to this watch before it was ended.
    """

    default_reason = "too_far_behind"

    def __init__(self, message: str, *, resume_after: Optional[int] = None) -> None:
        super().__init__(message, data={"resume_after": resume_after})
        self.resume_after: Optional[int] = resume_after


# --- errors found by the client --------------------------------------------------------


class ProtocolError(EvstoreError):
    """The daemon sent something that is not a JSON-RPC 2.0 response the client can
    read (not JSON, another request's id, or a line over the client's size cap). The
    connection is closed; the next call opens a new one."""

    default_reason = "protocol"


class EvstoreConnectionError(EvstoreError, ConnectionError):
    """The connection to the daemon failed. Also a built-in ``ConnectionError``.

    Attributes:
        socket_path: the path of the daemon's socket.
    """

    default_reason = "connection"

    def __init__(self, message: str, *, socket_path: str) -> None:
        EvstoreError.__init__(self, message)
        self.socket_path: str = socket_path


class Unreachable(EvstoreConnectionError):
    """No daemon could be connected to at the socket path: it is not running, the path
    is wrong, or the socket's permissions do not let this user in."""

    default_reason = "unreachable"


class ConnectionLost(EvstoreConnectionError):
    """The daemon closed the connection (it stopped, or dropped this client) before
    answering. A request in flight may or may not have been carried out: retry an
    ``append`` with the same idempotency ``key`` to be safe."""

    default_reason = "connection_lost"


class Timeout(EvstoreConnectionError, TimeoutError):
    """No answer came within the timeout. The connection is closed (a watch keeps its
    connection and can be read again). Also a built-in ``TimeoutError``."""

    default_reason = "timeout"


_BY_REASON: Dict[str, Type[EvstoreError]] = {
    cls.default_reason: cls
    for cls in (
        NotFound, Conflict, Deleted, TooLarge, InvalidEvent, InvalidTransition, StorageFull, Unavailable, Forbidden, Corrupt,
        ParseError, InvalidRequest, MethodNotFound, InvalidParams, InternalError,
    )
    if cls.default_reason is not None
}

_BY_CODE: Dict[int, Type[EvstoreError]] = {
    -32700: ParseError,
    -32600: InvalidRequest,
    -32601: MethodNotFound,
    -32602: InvalidParams,
    -32603: InternalError,
    -32001: NotFound,
    -32002: Conflict,
    -32003: Deleted,
    -32004: TooLarge,
    -32005: InvalidEvent,
    -32006: StorageFull,
    -32007: Unavailable,
    -32008: Forbidden,
    -32009: Corrupt,
    -32014: InvalidTransition,
}


def error_from_response(error: Mapping[str, Any]) -> EvstoreError:
    """The exception for the ``error`` member of a JSON-RPC response.

    The class is chosen by ``data.reason`` when the daemon sends one it knows, else by
    ``code``; an unknown reason or code gives a plain `EvstoreError` that still carries
    both.
    """
    raw_data = error.get("data")
    data: Mapping[str, Any] = raw_data if isinstance(raw_data, dict) else {}
    raw_code = error.get("code")
    code = raw_code if isinstance(raw_code, int) and not isinstance(raw_code, bool) else None
    raw_reason = data.get("reason")
    reason = raw_reason if isinstance(raw_reason, str) else None
    raw_message = error.get("message")
    message = raw_message if isinstance(raw_message, str) else f"error {code}"
    cls: Type[EvstoreError] = EvstoreError
    if reason is not None and reason in _BY_REASON:
        cls = _BY_REASON[reason]
    elif reason is None and code is not None and code in _BY_CODE:
        cls = _BY_CODE[code]
    return cls(message, code=code, reason=reason, data=data)
