"""A client for evstore, the event-sourced local database: it talks to the `evstored`
daemon over its Unix socket (newline-delimited JSON-RPC 2.0). Standard library only.

::

    import evstore
    from evstore import Event

    with evstore.connect() as db:
        result = db.append(Event.status("job/42", "en_route", by="ana"))
        job = db.get("job/42")
        db.append(Event.edit("job/42", {"address": "12 Main St"}), if_match=job["rev"])
        for entity in db.list(type="job", status="en_route"):
            print(entity["entity"])

The socket is found as ``evctl`` finds it (`resolve_socket`). Errors are `EvstoreError`
subclasses named after the daemon's stable reasons (`NotFound`, `Conflict`, ...).
"""
from .client import (
    DEFAULT_MAX_LINE_BYTES,
    AppendResult,
    Client,
    JSONObject,
    START,
    Watch,
    ZERO_ID,
    connect,
    default_socket_candidates,
    resolve_socket,
)
from .errors import (
    Conflict,
    ConnectionLost,
    Corrupt,
    Deleted,
    EvstoreConnectionError,
    EvstoreError,
    Forbidden,
    InternalError,
    InvalidEvent,
    InvalidTransition,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    NotFound,
    ParseError,
    ProtocolError,
    StorageFull,
    Timeout,
    TooLarge,
    Unavailable,
    Unreachable,
    WatchOverflow,
    error_from_response,
)
from .events import Event, blob_reference, new_entity_id, new_ulid

__version__ = "0.5.0"
"""The version of the client (that of the evstore release it comes with)."""

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "AppendResult",
    "Client",
    "Conflict",
    "ConnectionLost",
    "Corrupt",
    "Deleted",
    "Event",
    "EvstoreConnectionError",
    "EvstoreError",
    "Forbidden",
    "InternalError",
    "InvalidEvent",
    "InvalidTransition",
    "InvalidParams",
    "InvalidRequest",
    "JSONObject",
    "MethodNotFound",
    "NotFound",
    "ParseError",
    "ProtocolError",
    "StorageFull",
    "Timeout",
    "TooLarge",
    "Unavailable",
    "Unreachable",
    "Watch",
    "WatchOverflow",
    "START",
    "ZERO_ID",
    "blob_reference",
    "connect",
    "default_socket_candidates",
    "error_from_response",
    "new_entity_id",
    "new_ulid",
    "resolve_socket",
]
