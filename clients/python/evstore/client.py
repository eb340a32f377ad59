"""The connection to `evstored`: newline-delimited JSON-RPC 2.0 over its Unix socket."""
import base64
import binascii
import hashlib
import json
import os
import socket as _socket
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Union

from .errors import (
    ConnectionLost,
    Corrupt,
    EvstoreConnectionError,
    EvstoreError,
    ProtocolError,
    Timeout,
    Unreachable,
    WatchOverflow,
    error_from_response,
)
from .events import Event

__all__ = [
    "AppendResult",
    "Client",
    "DEFAULT_MAX_LINE_BYTES",
    "JSONObject",
    "Watch",
    "ZERO_ID",
    "connect",
    "default_socket_candidates",
    "resolve_socket",
]

#: A JSON object as the client returns it.
JSONObject = Dict[str, Any]

#: The longest line the client reads from the daemon before it gives up on the
#: connection (`ProtocolError`). A page of `log` holds at most ``page_size`` events of at
#: most the daemon's ``max_event_bytes`` each (64 KiB by default).
DEFAULT_MAX_LINE_BYTES = 256 << 20

#: The start of a node's log: as ``after`` of `Client.watch` or `Client.log`, it starts
#: at the first event the node stored. Feeds resume by seq (each event's ``"seq"``).
START = 0

#: What 0.4 passed as ``after`` to start at the first event; ``after`` is a seq now, and
#: this is the same as `START`.
ZERO_ID = START

_RECEIVE_CHUNK = 1 << 16


# --- where the socket is ---------------------------------------------------------------


def default_socket_candidates(environ: Optional[Mapping[str, str]] = None) -> List[str]:
    """The default socket paths, in the order they are tried:
    ``$XDG_RUNTIME_DIR/evstore/evstored.sock`` (when the variable is set and not empty),
    ``/run/evstore/evstored.sock``, ``./.evstore/evstored.sock``."""
    env = os.environ if environ is None else environ
    candidates = []
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        candidates.append(runtime + "/evstore/evstored.sock")
    candidates.append("/run/evstore/evstored.sock")
    candidates.append("./.evstore/evstored.sock")
    return candidates


def resolve_socket(socket: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> str:
    """The daemon's socket path, found as ``evctl`` finds it: ``socket`` when given (and
    not empty), else ``$EVSTORE_SOCKET`` (when not empty), else the first of
    `default_socket_candidates` that exists, else the first of them (for the message of
    the error that follows)."""
    if socket:
        return socket
    env = os.environ if environ is None else environ
    variable = env.get("EVSTORE_SOCKET")
    if variable:
        return variable
    candidates = default_socket_candidates(env)
    for candidate in candidates:
        if os.path.exists(candidate):
            return candidate
    return candidates[0]


# --- one connection --------------------------------------------------------------------


class _Line:
    """A connected socket read line by line, with a size cap on each line. A read that
    times out leaves the stream intact (the bytes read so far stay buffered)."""

    def __init__(self, path: str, timeout: Optional[float], max_line_bytes: int) -> None:
        self.path = path
        self.max_line_bytes = max_line_bytes
        self.buffer = bytearray()
        self.scanned = 0  # bytes of `buffer` known to hold no newline
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
        except OSError as error:
            sock.close()
            raise _unreachable(path, error) from error
        self.sock: Optional[_socket.socket] = sock

    def send(self, line: bytes, timeout: Optional[float]) -> None:
        """Sends one request line (`_encode`)."""
        sock = self._open()
        try:
            sock.settimeout(timeout)
            sock.sendall(line)
        except _socket.timeout as error:
            raise Timeout(f"could not send to the evstore daemon at {self.path} within {timeout} s",
                          socket_path=self.path) from error
        except OSError as error:
            refusal = self._refusal_left()
            if refusal is not None:
                raise refusal from error
            raise ConnectionLost(f"the evstore daemon at {self.path} closed the connection: {error.strerror or error}",
                                 socket_path=self.path) from error

    def _refusal_left(self) -> Optional[EvstoreError]:
        """The error the daemon sent before it closed the connection unread (a client with
        no access is told so as it connects), or None when it left none."""
        try:
            message = self.receive(1.0)
        except EvstoreError:
            return None
        if isinstance(message, dict) and message.get("id") is None and isinstance(message.get("error"), dict):
            return error_from_response(message["error"])
        return None

    def receive(self, timeout: Optional[float]) -> Any:
        """The next message, parsed. Raises `Timeout` when none is complete in time."""
        sock = self._open()
        while True:
            end = self.buffer.find(b"\n", self.scanned)
            if end > self.max_line_bytes or (end < 0 and len(self.buffer) > self.max_line_bytes):
                raise ProtocolError(
                    f"the evstore daemon at {self.path} sent a line longer than {self.max_line_bytes} bytes; "
                    "read smaller pages (page_size) or raise max_line_bytes")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[:end + 1]
                self.scanned = 0
                try:
                    return json.loads(line)
                except ValueError as error:
                    raise ProtocolError(f"the evstore daemon at {self.path} sent a line that is not JSON: {error}") \
                        from error
            self.scanned = len(self.buffer)
            try:
                sock.settimeout(timeout)
                chunk = sock.recv(_RECEIVE_CHUNK)
            except _socket.timeout as error:
                raise Timeout(f"the evstore daemon at {self.path} did not answer within {timeout} s",
                              socket_path=self.path) from error
            except OSError as error:
                raise ConnectionLost(
                    f"the connection to the evstore daemon at {self.path} failed: {error.strerror or error}",
                    socket_path=self.path) from error
            if not chunk:
                raise ConnectionLost(f"the evstore daemon at {self.path} closed the connection",
                                     socket_path=self.path)
            self.buffer += chunk

    def closed_while_idle(self) -> bool:
        """Whether the daemon has closed this connection while nothing was asked of it
        (it closes idle connections after its idle_timeout_s): a new one may take its
        place, as nothing sent on it is lost. Does not wait."""
        if self.sock is None:
            return True
        if self.buffer:
            return False
        try:
            self.sock.settimeout(0)
            return self.sock.recv(1, _socket.MSG_PEEK) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    def _open(self) -> _socket.socket:
        if self.sock is None:
            raise ConnectionLost(f"the connection to the evstore daemon at {self.path} is closed",
                                 socket_path=self.path)
        return self.sock

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None


def _encode(request: Mapping[str, Any]) -> bytes:
    """A request as its line. Raises ``TypeError`` or ``ValueError`` (NaN, infinity) for
    what JSON cannot carry, before anything is sent."""
    return json.dumps(request, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def _base64(data: memoryview) -> str:
    """Bytes as the daemon takes them: base64, RFC 4648's standard alphabet, with padding."""
    return base64.b64encode(data).decode("ascii")


def _unbase64(text: Any, path: str) -> bytes:
    """The bytes of a ``data`` member the daemon sent in base64."""
    if not isinstance(text, str):
        raise ProtocolError(f"the evstore daemon at {path} answered without the blob's bytes")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:
        raise ProtocolError(f"the evstore daemon at {path} sent bytes that are not base64: {error}") from error


def _unreachable(path: str, error: OSError) -> Unreachable:
    import errno

    if error.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTDIR):
        message = (f"no evstore daemon is listening on {path}. Start it with `evstored` (or `systemctl start "
                   "evstored`), or pass its socket to connect() or set EVSTORE_SOCKET.")
    elif error.errno in (errno.EACCES, errno.EPERM):
        message = (f"permission denied on {path}: only the socket's group may connect. Ask an administrator to "
                   "add you to that group (evstore under systemd), then log in again.")
    elif isinstance(error, _socket.timeout):
        message = f"the evstore daemon at {path} did not accept the connection in time"
    else:
        message = f"cannot connect to the evstore daemon at {path}: {error.strerror or error}."
    return Unreachable(message, socket_path=path)


def _result(message: Any, request_id: int, path: str) -> Any:
    """The result of a response to ``request_id``, or raises its error."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise ProtocolError(f"the evstore daemon at {path} sent something that is not a JSON-RPC 2.0 response")
    if "error" in message and message.get("id") in (request_id, None):
        error = message["error"]
        raise error_from_response(error if isinstance(error, dict) else {})
    if message.get("id") != request_id or "result" not in message:
        raise ProtocolError(
            f"the evstore daemon at {path} answered request {message.get('id')!r} while request {request_id} "
            "was waiting")
    return message["result"]


# --- results ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AppendResult:
    """What `Client.append` returns.

    Attributes:
        ids: one event id per event appended, in order. An event whose ``key`` the node
            had seen holds the id of the event first appended with that key.
        versions: each entity's version after the batch (its greatest event id).
        revs: each entity's rev after the batch (the seq of the latest event this node
            folded into it): pass it as ``if_match`` to append only if the entity has not
            changed on this node since, replication included.
        appended: how many events were written (repeated keys are not).
    """

    ids: List[str]
    versions: Dict[str, str]
    appended: int
    revs: Dict[str, int] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """The id of the first event (the only one, for a single event)."""
        return self.ids[0]


#: An event in the input form: any mapping (a dict, or an `Event`).
EventInput = Mapping[str, Any]


# --- the client ------------------------------------------------------------------------


class Client:
    """A connection to the evstore daemon.

    Open one with `connect`. It is a context manager (the ``with`` block closes it)::

        with evstore.connect() as db:
            db.append(Event.status("job/42", "en_route"))
            print(db.get("job/42")["status"]["current"])

    One request is on the wire at a time: a lock makes each call (and each page of an
    iterator) a send followed by the read of its answer, so one `Client` may be shared
    by threads; they take turns. Open one client per thread to run requests side by
    side. Requests on one connection are answered in order, so a client always reads
    its own writes.

    When the connection fails (`ConnectionLost`, `Timeout`, `ProtocolError`), the error
    is raised and the next call opens a new connection. A request in flight then may or
    may not have been carried out: give appends an idempotency ``key`` to retry them
    safely.

    Args:
        socket: the daemon's socket path; see `resolve_socket` for the default.
        timeout: seconds to wait to connect and for each answer (None: no limit).
        max_line_bytes: the longest response line read (`DEFAULT_MAX_LINE_BYTES`).

    Raises:
        Unreachable: no daemon answers at the socket.
    """

    def __init__(
        self,
        socket: Optional[str] = None,
        timeout: Optional[float] = 30.0,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        self.socket_path: str = resolve_socket(socket)
        """The path of the daemon's socket."""
        self.timeout: Optional[float] = timeout
        """Seconds to wait to connect and for each answer (None: no limit)."""
        self.max_line_bytes: int = max_line_bytes
        """The longest response line read."""
        self._lock = threading.Lock()
        self._next_id = 1
        self._closed = False
        self._line: Optional[_Line] = _Line(self.socket_path, timeout, max_line_bytes)

    # --- the connection ---

    def close(self) -> None:
        """Closes the connection. Calls after it raise ``ValueError``."""
        with self._lock:
            self._closed = True
            if self._line is not None:
                self._line.close()
                self._line = None

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<evstore.Client {self.socket_path!r} {state}>"

    def call(self, method: str, params: Optional[Mapping[str, Any]] = None, *,
             timeout: Optional[float] = None) -> Any:
        """Calls any method of the daemon and returns its result (docs/api.md lists
        them). Parameters left None are not sent.

        Args:
            method: the method's name, e.g. ``"rebuild"``.
            params: its named parameters.
            timeout: seconds to wait for the answer, for this call only (default: the
                client's).

        Raises:
            EvstoreError: the daemon's error, as its subclass (`NotFound`, ...), or a
                failure of the connection (`EvstoreConnectionError`, `ProtocolError`).
            ValueError: the client is closed, or ``method`` is ``"watch"`` (use `watch`).
        """
        if method == "watch":
            raise ValueError("watch needs a connection of its own: use Client.watch()")
        wait = self.timeout if timeout is None else timeout
        request: Dict[str, Any] = {"jsonrpc": "2.0", "id": 0, "method": method}
        if params is not None:
            request["params"] = {name: value for name, value in params.items() if value is not None}
        with self._lock:
            if self._closed:
                raise ValueError("the evstore client is closed")
            request_id = request["id"] = self._next_id
            encoded = _encode(request)
            self._next_id += 1
            if self._line is not None and self._line.closed_while_idle():
                self._line.close()
                self._line = None
            if self._line is None:
                self._line = _Line(self.socket_path, self.timeout, self.max_line_bytes)
            line = self._line
            try:
                line.send(encoded, wait)
                while True:
                    message = line.receive(wait)
                    # Notifications are only sent to a watching connection; skip any.
                    if not (isinstance(message, dict) and "id" not in message and "method" in message):
                        break
                return _result(message, request_id, self.socket_path)
            except BaseException as error:
                # An error the daemon answered leaves the connection in step; anything
                # else (a failure, an answer out of step, an interrupted read) does not.
                answered = isinstance(error, EvstoreError) and not isinstance(
                    error, (EvstoreConnectionError, ProtocolError))
                if not answered:
                    line.close()
                    self._line = None
                raise

    # --- writing ---

    def append(
        self,
        *events: Union[EventInput, Iterable[EventInput]],
        by: Optional[str] = None,
        if_match: Optional[int] = None,
        key: Optional[str] = None,
    ) -> AppendResult:
        """Appends events, all of them in one transaction or none.

        Takes events (dicts in the input form, or `Event`) as arguments, or one list of
        them::

            db.append(Event.status("job/42", "en_route"), Event.add("job/42", "parts", "valve-3"))
            db.append([{"entity": "job/42", "kind": "delete"}])

        Args:
            events: the events.
            by: the actor, set on each event that has no ``by``.
            if_match: the entity's ``rev`` last read (from `get`, `list` or an append's
                ``revs``), set on each event that has no ``if_match``: the append is a
                `Conflict` when the entity changed on this node since.
            key: an idempotency key, for a single event only: when the node has seen
                it, nothing is appended and the id of the first event is returned.

        Returns:
            The ids of the events and the entities' new versions.

        Raises:
            InvalidEvent: an event breaks the input rules (``error.index`` says which).
            Conflict: ``if_match`` does not match.
            Deleted: the entity is deleted (restore it first).
            TooLarge: an event is over the daemon's ``max_event_bytes``.
            StorageFull: the disk is full; nothing was written.
            ValueError: no events, or ``key`` with more than one event.
        """
        batch: List[Dict[str, Any]] = []
        for item in events:
            if isinstance(item, Mapping):
                batch.append(dict(item))
            else:
                batch.extend(dict(event) for event in item)
        if not batch:
            raise ValueError("append needs at least one event")
        if key is not None and len(batch) != 1:
            raise ValueError("key is one event's idempotency key: set \"key\" on each event of a batch")
        for event in batch:
            for name, value in (("by", by), ("if_match", if_match), ("key", key)):
                if value is not None:
                    event.setdefault(name, value)
        result = self.call("append", {"events": batch})
        ids = [str(i) for i in result["ids"]]
        return AppendResult(ids=ids, versions=dict(result.get("versions", {})),
                            appended=int(result.get("appended", len(ids))),
                            revs={str(k): int(v) for k, v in dict(result.get("revs", {})).items()})

    def resolve(
        self,
        entity: str,
        fields: Optional[Mapping[str, Any]] = None,
        *,
        status: Optional[str] = None,
        by: Optional[str] = None,
        key: Optional[str] = None,
    ) -> AppendResult:
        """Settles conflicts of ``entity`` with the values to keep, as ``evctl resolve``
        does: an edit of ``fields`` marked ``resolve`` (a plain edit of a field in conflict
        only joins the conflict), and a status event when ``status`` is given (a status
        event always settles a status conflict). Both in one transaction.

        Args:
            entity: the entity, ``TYPE/ID``.
            fields: the values to keep, by field name (None clears a field).
            status: the status to keep.
            by: the actor.
            key: an idempotency key for the edit (the status event gets ``KEY.status``
                when there is an edit too).

        Returns:
            The ids of the events and the entity's new version.

        Raises:
            Deleted: the entity is deleted (restore it first).
            ValueError: neither fields nor status.
        """
        batch: List[Dict[str, Any]] = []
        if fields:
            batch.append(Event.edit(entity, fields, key=key, by=by, resolve=True))
        if status is not None:
            status_key = key if not batch or key is None else key + ".status"
            batch.append(Event.status(entity, status, key=status_key, by=by))
        if not batch:
            raise ValueError("resolve needs the values to keep: fields, status or both")
        return self.append(batch)

    # --- reading ---

    def get(self, entity: str, *, sync: bool = False) -> JSONObject:
        """The state of an entity (``version``, ``deleted``, ``status``, ``fields``,
        ``sets``, ``conflicts``, ...; see the spec's Projection section).

        Args:
            entity: ``TYPE/ID``.
            sync: also ``"sync": {peer name: "synced" | "pending" | "failed"}`` for
                every configured peer: whether it holds every event of the entity by
                what it last held ("failed": it refused one as a dead letter, or the
                entity is pending while the peer is failing or terminal).

        Raises:
            NotFound: no event of the entity is held on this node.
        """
        params: Dict[str, Any] = {"entity": entity}
        if sync:
            params["sync"] = True
        result: JSONObject = self.call("get", params)
        return result

    def list(
        self,
        type: Optional[str] = None,
        status: Optional[str] = None,
        include_deleted: bool = False,
        limit: Optional[int] = None,
        *,
        after: Optional[str] = None,
        pending_for: Optional[str] = None,
        page_size: int = 1000,
    ) -> Iterator[JSONObject]:
        """The entities, in entity order: ``{"entity", "version", "status",
        "deleted"}`` each. An iterator that reads page after page as it goes.

        Args:
            type: only the entities of this type.
            status: only the entities whose current status is this.
            include_deleted: also the deleted entities.
            limit: stop after this many (None: all of them).
            after: start after this entity (a ``next`` cursor).
            pending_for: only the entities this peer (a name) lacks an event of, by
                what it last held: those not yet synced there. An unknown peer is
                `NotFound`.
            page_size: entities per request (at most 10000).
        """
        params = {"type": type, "status": status, "include_deleted": include_deleted or None,
                  "pending_for": pending_for}
        return self._pages("list", "entities", params, after, limit, page_size)

    def log(
        self,
        after: Optional[int] = None,
        entity: Optional[str] = None,
        origin: Optional[str] = None,
        limit: Optional[int] = None,
        *,
        type: Optional[str] = None,
        consumer: Optional[str] = None,
        page_size: int = 1000,
    ) -> Iterator[JSONObject]:
        """The events in the order this node stored them (the input form plus ``id``,
        ``origin``, the causal context and ``seq``). An iterator that reads page after
        page as it goes.

        Every event the node stores (appended, replicated or imported) takes its next
        ``seq``: to resume later, pass the ``seq`` of the last event read as ``after``,
        or keep the place in the daemon with a durable consumer: ``consumer=NAME`` starts
        after what it acknowledged, and `ack` acknowledges what you have processed.

        Args:
            after: start after this seq (None or 0: from the start).
            entity: only the events of this entity.
            origin: only the events made by this node id.
            limit: stop after this many (None: all of them).
            type: only the events of entities of this type.
            consumer: start after the seq this durable consumer acknowledged (not with
                ``after``); an unknown name is `NotFound`.
            page_size: events per request (at most 10000).
        """
        if after is not None and not isinstance(after, int):
            raise TypeError("after is a seq (an int: the \"seq\" of the last event read), not an event id")
        if consumer is not None and after is not None:
            raise ValueError("give after or consumer, not both: a consumer resumes after what it acknowledged")
        return self._pages("log", "events", {"entity": entity, "origin": origin, "type": type, "consumer": consumer},
                           after, limit, page_size)

    def conflicts(self, type: Optional[str] = None, limit: Optional[int] = None, *,
                  page_size: int = 1000) -> Iterator[JSONObject]:
        """The entities in conflict (``{"entity", "fields": [names], "status": bool}``
        each); `get` shows the competing values. An iterator over every page."""
        return self._pages("conflicts", "entities", {"type": type}, None, limit, page_size)

    def dead_letters(self, limit: Optional[int] = None, *, page_size: int = 1000) -> Iterator[JSONObject]:
        """The events received from peers that failed validation, with the reason
        (``{"key", "id", "origin", "peer", "reason", "received_at", "raw"}`` each). An
        iterator over every page."""
        return self._pages("dead_letters", "dead_letters", {}, None, limit, page_size)

    #: The most ids one ``dead_letters.retry`` or ``dead_letters.drop`` request names; the
    #: methods below send more in several requests.
    DEAD_LETTER_IDS_PER_CALL = 1000

    def retry_dead_letters(self, ids: Iterable[str]) -> JSONObject:
        """Validates the named dead letters again with the daemon's settings now in force
        (after an upgrade, or a reload that changed a limit) and stores those that pass, as
        a sync would. Each id is a dead letter's ``key`` or its event ``id``.

        Returns ``{"stored": [ids], "still_invalid": [{"id", "reason", "message"}]}``: a
        dead letter still invalid stays; an id that names none has reason ``not_found``.
        """
        stored: List[str] = []
        still_invalid: List[JSONObject] = []
        for chunk in self._id_chunks(ids):
            result = self.call("dead_letters.retry", {"ids": chunk})
            stored += result.get("stored") or []
            still_invalid += result.get("still_invalid") or []
        return {"stored": stored, "still_invalid": still_invalid}

    def drop_dead_letters(self, ids: Iterable[str]) -> int:
        """Removes the named dead letters (by ``key`` or event ``id``) for good: a peer
        that offers a dropped event again has it skipped. Returns how many were removed;
        ids that name no dead letter are not counted."""
        return sum(int(self.call("dead_letters.drop", {"ids": chunk})["dropped"]) for chunk in self._id_chunks(ids))

    def dismiss_divergent(self, ids: Iterable[str]) -> int:
        """Removes the records of the named divergent events (events a peer holds with
        other content under the same id, as ``attention`` lists them) once dealt with.
        Returns how many records went; a later sync that finds the same difference
        records it again."""
        if isinstance(ids, str):
            raise TypeError("ids is a list of event ids, not one string")
        ids = list(ids)
        return sum(int(self.call("divergent.dismiss", {"ids": ids[start:start + 256]})["dismissed"])
                   for start in range(0, len(ids), 256))

    def dismiss_rule_violations(self, ids: Iterable[str]) -> int:
        """Removes the records of the named rule violations (events from other nodes that
        break this daemon's types file, as ``attention`` lists them) once dealt with; the
        events stay. Returns how many records went."""
        if isinstance(ids, str):
            raise TypeError("ids is a list of event ids, not one string")
        ids = list(ids)
        return sum(int(self.call("rule_violations.dismiss", {"ids": ids[start:start + 256]})["dismissed"])
                   for start in range(0, len(ids), 256))

    def _id_chunks(self, ids: Iterable[str]) -> Iterator[List[str]]:
        if isinstance(ids, str):
            raise TypeError("ids is a list of dead letter keys or event ids, not one string")
        chunk: List[str] = []
        for id in ids:
            chunk.append(id)
            if len(chunk) == self.DEAD_LETTER_IDS_PER_CALL:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def attention(self, *, page_size: int = 1000) -> JSONObject:
        """Everything `status` counts under ``needs_attention``, every page read:
        ``{"conflicts": [{"entity", "fields", "status"}], "dead_letters": [as
        dead_letters gives them], "divergent": [{"id", "origin", "peer", "peer_node",
        "here", "there", "detected_at"}], "rule_violations": [{"id", "origin", "entity",
        "rule", "peer", "detected_at"}], "rejected_proposals": [{"id", "entity", "status",
        "reason", "decision"}], "peers": [{"name", "url", "state", "failures", "last_error",
        "since"}]}``. Nothing needs attention when all six are empty."""
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        merged: JSONObject = {"conflicts": [], "dead_letters": [], "divergent": [], "rule_violations": [],
                              "rejected_proposals": [], "peers": []}
        cursor: Optional[str] = None
        while True:
            page = self.call("attention", {"limit": page_size, "after": cursor})
            merged["conflicts"] += page.get("conflicts") or []
            merged["dead_letters"] += page.get("dead_letters") or []
            merged["peers"] = page.get("peers") or []
            merged["divergent"] = page.get("divergent") or []
            merged["rule_violations"] = page.get("rule_violations") or []
            merged["rejected_proposals"] = page.get("rejected_proposals") or []
            following = page.get("next")
            if not isinstance(following, str) or following == cursor:
                return merged
            cursor = following

    def _pages(self, method: str, member: str, params: Mapping[str, Any], after: Optional[Any],
               limit: Optional[int], page_size: int) -> Iterator[JSONObject]:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        if limit is not None and limit < 0:
            raise ValueError("limit must not be negative")
        return self._page_iterator(method, member, dict(params), after, limit, page_size)

    def _page_iterator(self, method: str, member: str, params: Dict[str, Any], after: Optional[Any],
                       limit: Optional[int], page_size: int) -> Iterator[JSONObject]:
        left = limit
        cursor = after
        while left is None or left > 0:
            page = self.call(method, dict(params, after=cursor,
                                          limit=page_size if left is None else min(page_size, left)))
            items: List[JSONObject] = page.get(member) or []
            if left is not None:
                items = items[:left]
                left -= len(items)
            yield from items
            # A durable consumer names where the first page starts; the next go on by seq.
            params.pop("consumer", None)
            following = page.get("next")
            # A cursor is an entity or key (list, conflicts, ...) or a seq (log).
            if isinstance(following, bool) or not isinstance(following, (str, int)) or following == cursor:
                return
            cursor = following

    def status(self) -> JSONObject:
        """The node's status: ``node``, ``events``, ``entities``, ``digest``, ``clock``,
        ``needs_attention``, ``peers`` and more (docs/api.md)."""
        result: JSONObject = self.call("status")
        return result

    # --- durable consumers ---

    def consumers(self) -> List[JSONObject]:
        """The durable consumers: ``{"name", "seq", "lag", "acked_at"}`` each, ``seq``
        the last seq acknowledged and ``lag`` the events stored since."""
        consumers: List[JSONObject] = self.call("consumers.list")["consumers"]
        return consumers

    def ack(self, consumer: str, seq: int) -> JSONObject:
        """Acknowledges every event up to ``seq`` for the durable consumer ``consumer``,
        creating it when new (``seq`` 0: it reads from the start), and returns it
        (``{"name", "seq", "lag", "acked_at"}``). Acknowledge after the
        events are processed, a page or a few hundred at a time (each acknowledgement is a
        durable write): after a crash, reading resumes after the last one.

        Raises:
            Conflict: the consumer acknowledged more already (acknowledgements only move
                forward).
            InvalidParams: ``seq`` is beyond this node's head.
        """
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise TypeError("seq is a seq (an int: the \"seq\" of the last event processed)")
        result = self.call("consumers.ack", {"name": consumer, "seq": seq})
        entry: JSONObject = next(c for c in result["consumers"] if c["name"] == consumer)
        return entry

    def remove_consumer(self, consumer: str) -> None:
        """Forgets a durable consumer; an unknown name is `NotFound`."""
        self.call("consumers.remove", {"name": consumer})

    # --- replication ---

    def peers(self) -> List[JSONObject]:
        """The replication peers (``{"name", "url", "source"}`` each), those of the
        config file first."""
        peers: List[JSONObject] = self.call("peers.list")["peers"]
        return peers

    def add_peer(self, name: str, url: str) -> List[JSONObject]:
        """Adds a peer (``unix:///PATH``, ``ssh://...`` or ``exec:COMMAND``) and syncs
        with it in the background; returns every peer. A name taken with another URL is
        a `Conflict`."""
        peers: List[JSONObject] = self.call("peers.add", {"name": name, "url": url})["peers"]
        return peers

    def show_peer(self, name: str) -> JSONObject:
        """One peer: ``url``, ``node``, ``state``, ``last_success``, ``failures``,
        ``last_error``, ``since``, its last known ``vector`` and, per origin this node
        holds events of, ``{"origin", "held", "lacking"}`` under ``origins``; ``pending``
        sums what it lacks. An unknown name is `NotFound`."""
        peer: JSONObject = self.call("peers.show", {"name": name})
        return peer

    def remove_peer(self, name: str) -> List[JSONObject]:
        """Removes a peer added with `add_peer`; returns every peer left. An unknown
        name is `NotFound`, a peer of the config file `Forbidden`."""
        peers: List[JSONObject] = self.call("peers.remove", {"name": name})["peers"]
        return peers

    def sync(self, peer: Optional[str] = None, *, timeout: Optional[float] = None) -> List[JSONObject]:
        """Syncs now with a peer (a name or a URL), or with every peer, and returns one
        entry per session (``sent``, ``received``, ``error``, ...). A failed session is
        not raised: its entry has ``error``, ``{"reason", "message"}``.

        Args:
            peer: a peer's name or URL (None: every peer).
            timeout: seconds to wait for the sessions (default: the client's).
        """
        sessions: List[JSONObject] = self.call("sync", {"peer": peer}, timeout=timeout)["peers"]
        return sessions

    # --- blobs ---

    #: The most bytes `put_blob` sends in one ``blob.put``, and the size of each
    #: ``blob.write`` of a larger blob's upload (3 MiB: 4 MiB in base64).
    BLOB_PIECE_BYTES = 3 << 20

    #: The bytes `get_blob` asks for in each ``blob.get``: the most the daemon gives in one.
    BLOB_GET_BYTES = 4 << 20

    def put_blob(self, data: bytes, hash: Optional[str] = None) -> JSONObject:
        """Stores ``data`` as a blob (a photo, a signature, a document: anything too large
        for an event) and returns ``{"hash", "size", "existed"}``. ``hash`` is
        ``sha256:`` and the 64 hex digits of the bytes' SHA-256: with ``size``, what an
        event names the blob by (`blob_reference`). ``existed`` is True when the node held
        the blob already (nothing changed).

        Up to `BLOB_PIECE_BYTES` go in one ``blob.put``; more in an upload on this
        client's connection: ``blob.upload``, ``blob.write`` in pieces of
        `BLOB_PIECE_BYTES`, ``blob.commit``. The blob exists, whole and synced to the
        daemon's disk, once this returns, and not before: an upload that fails is aborted
        (or, when the connection failed, dropped by the daemon with it).

        Args:
            data: the blob's bytes (any bytes-like object).
            hash: the hash the bytes must have; when they do not, nothing is stored.

        Raises:
            TooLarge: the blob is over the daemon's ``max_blob_bytes``.
            StorageFull: the blobs would pass ``max_blob_store_bytes``, or leave the disk
                less than ``blob_reserve_bytes`` free; nothing was stored.
            Unavailable: ``max_blob_uploads`` uploads are under way, or two of this
                connection's: retry later.
            InvalidParams: the bytes do not hash to ``hash``.
            Forbidden: the connection's access is read-only.
        """
        if isinstance(data, str):
            raise TypeError("data is bytes: encode the text first")
        view = memoryview(data).cast("B")
        size = len(view)
        if size <= self.BLOB_PIECE_BYTES:
            result: JSONObject = self.call("blob.put", {"data": _base64(view), "hash": hash})
            return result
        upload = self.call("blob.upload", {"size": size})["upload"]
        try:
            for offset in range(0, size, self.BLOB_PIECE_BYTES):
                piece = view[offset:offset + self.BLOB_PIECE_BYTES]
                self.call("blob.write", {"upload": upload, "offset": offset, "data": _base64(piece)})
            result = self.call("blob.commit", {"upload": upload, "hash": hash})
        except EvstoreError as error:
            # A failed connection took the upload with it; otherwise it may still be under
            # way (a refused piece), and is dropped so it holds no place.
            if not isinstance(error, (EvstoreConnectionError, ProtocolError)):
                try:
                    self.call("blob.abort", {"upload": upload})
                except EvstoreError:
                    pass
            raise
        return result

    def get_blob(self, hash: str) -> bytes:
        """The bytes of the blob ``hash`` (``sha256:<hex>``), read in ``blob.get`` pieces of
        `BLOB_GET_BYTES` and checked against the hash.

        Raises:
            NotFound: this node does not hold the blob (`blob_stat` tells without
                raising). A blob an event names may be pending here: its event came from a
                peer, and its bytes were not put on this node.
            InvalidParams: ``hash`` is not ``sha256:`` and 64 lowercase hex digits.
            Corrupt: the bytes read do not hash to ``hash`` (the blob's file is damaged).
        """
        received = bytearray()
        while True:
            result = self.call("blob.get", {"hash": hash, "offset": len(received), "length": self.BLOB_GET_BYTES})
            piece = _unbase64(result.get("data"), self.socket_path)
            received += piece
            size = result.get("size")
            if not isinstance(size, int) or isinstance(size, bool):
                raise ProtocolError(f"the evstore daemon at {self.socket_path} answered blob.get without a size")
            if len(received) >= size or not piece:
                break
        if len(received) != size:
            raise ProtocolError(
                f"the evstore daemon at {self.socket_path} gave {len(received)} bytes of blob {hash}, "
                f"which it says is {size} bytes")
        digest = "sha256:" + hashlib.sha256(received).hexdigest()
        if digest != hash:
            raise Corrupt(f"the bytes of blob {hash} read from the daemon hash to {digest}: its file is damaged")
        return bytes(received)

    def blob_stat(self, hash: str) -> JSONObject:
        """Whether this node holds the blob ``hash``: ``{"hash", "state": "present",
        "size"}``, or ``{"hash", "state": "unknown"}`` when it does not.

        Raises:
            InvalidParams: ``hash`` is not ``sha256:`` and 64 lowercase hex digits.
        """
        result: JSONObject = self.call("blob.stat", {"hash": hash})
        return result

    # --- watching ---

    def watch(
        self,
        after: Optional[int] = None,
        entity: Optional[str] = None,
        type: Optional[str] = None,
        *,
        consumer: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> "Watch":
        """Follows the events as they are committed, on a connection of its own.

        The watch is in place when this returns: every event stored from then on is
        delivered, in seq order (with ``after``, a seq, the held events after it come
        first; `START` replays the whole log). Iterate the `Watch`
        for the events; close it (or leave its ``with`` block) to end it::

            with db.watch(type="job") as events:
                for event in events:
                    print(event["entity"], event["kind"])

        Args:
            after: replay the held events after this seq first (the ``seq`` of the last
                event read, to resume).
            entity: only the events of this entity.
            type: only the events of entities of this type.
            consumer: replay the held events after what this durable consumer
                acknowledged first (not with ``after``); `ack` as you process them.
            timeout: the longest wait for the next event: iterating raises `Timeout`
                after it (the watch goes on; read again). None: wait as long as it takes.

        Raises:
            Unreachable: no daemon answers.
            InvalidParams: a parameter is not valid.
        """
        if self._closed:
            raise ValueError("the evstore client is closed")
        if after is not None and (isinstance(after, bool) or not isinstance(after, int)):
            raise TypeError("after is a seq (an int: the \"seq\" of the last event read), not an event id")
        if consumer is not None and after is not None:
            raise ValueError("give after or consumer, not both: a consumer resumes after what it acknowledged")
        return Watch(self.socket_path, {"after": after, "entity": entity, "type": type, "consumer": consumer},
                     connect_timeout=self.timeout, timeout=timeout, max_line_bytes=self.max_line_bytes)


class Watch(Iterator[JSONObject]):
    """A running watch: an iterator over the events as they are committed, with a
    connection of its own (see `Client.watch`).

    ``close()`` (or the end of its ``with`` block, or garbage collection) closes the
    connection, which ends the watch. Iterating raises:

    - `WatchOverflow` when the daemon ended the watch because it fell too far behind:
      watch again with ``after=error.resume_after`` to go on without a gap;
    - `ConnectionLost` when the daemon closed the connection (it stopped): watch again
      with ``after=watch.last_seq``;
    - `Timeout` when the ``timeout`` given passed without an event (the watch goes on).

    Meant for one thread.

    Attributes:
        last_seq: the seq of the last event read from it (``after`` when none was yet):
            where to resume.
        last_id: the id of the last event read from it (None when none was yet).
    """

    def __init__(self, socket_path: str, params: Mapping[str, Any], *,
                 connect_timeout: Optional[float], timeout: Optional[float], max_line_bytes: int) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self.last_seq: Optional[int] = params.get("after")
        self.last_id: Optional[str] = None
        self._line: Optional[_Line] = None
        line = _Line(socket_path, connect_timeout, max_line_bytes)
        self._line = line
        try:
            request = {"jsonrpc": "2.0", "id": 1, "method": "watch",
                       "params": {name: value for name, value in params.items() if value is not None}}
            line.send(_encode(request), connect_timeout)
            _result(line.receive(connect_timeout), 1, socket_path)
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> JSONObject:
        line = self._line
        if line is None:
            raise StopIteration
        while True:
            try:
                message = line.receive(self.timeout)
            except (ConnectionLost, ProtocolError):
                self.close()
                raise
            if not isinstance(message, dict):
                continue
            method = message.get("method")
            params = message.get("params")
            if method == "event" and isinstance(params, dict) and isinstance(params.get("event"), dict):
                event: JSONObject = params["event"]
                if isinstance(event.get("id"), str):
                    self.last_id = event["id"]
                seq = event.get("seq")
                if isinstance(seq, int) and not isinstance(seq, bool):
                    if self.last_seq is not None and seq <= self.last_seq:
                        continue  # never twice
                    self.last_seq = seq
                return event
            if method == "watch.overflow":
                self.close()
                details = params if isinstance(params, dict) else {}
                resume_after = details.get("resume_after")
                raise WatchOverflow(str(details.get("message") or "the watch fell too far behind and was ended"),
                                    resume_after=resume_after if isinstance(resume_after, int) else None)
            # Anything else (a notification of a later version) is not for this client.

    def close(self) -> None:
        """Ends the watch: closes its connection. Iterating afterwards stops at once."""
        line, self._line = self._line, None
        if line is not None:
            line.close()

    @property
    def closed(self) -> bool:
        """Whether the watch is over (closed, or ended by the daemon)."""
        return self._line is None

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def connect(
    socket: Optional[str] = None,
    timeout: Optional[float] = 30.0,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Client:
    """Connects to the evstore daemon.

    Args:
        socket: the daemon's socket path. None: ``$EVSTORE_SOCKET``, else the first of
            ``$XDG_RUNTIME_DIR/evstore/evstored.sock``, ``/run/evstore/evstored.sock``
            and ``./.evstore/evstored.sock`` that exists (as ``evctl`` does; see
            `resolve_socket`).
        timeout: seconds to wait to connect and for each answer (None: no limit).
        max_line_bytes: the longest response line read before the client gives up on
            the connection.

    Returns:
        A `Client`; close it, or use it in a ``with`` block.

    Raises:
        Unreachable: no daemon answers at the socket.
    """
    return Client(socket, timeout, max_line_bytes=max_line_bytes)
