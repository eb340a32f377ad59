"""Events in the input form, blob references, and fresh entity ids.

An event is a plain dict (``{"entity": "job/42", "kind": "status", "status":
"en_route"}``): `Client.append` takes any mapping. `Event` builds them with the names of
the members checked by the type checker::

    Event.status("job/42", "en_route", by="ana")
    Event.edit("job/42", {"address": "12 Main St", "phone": None})
    Event.add("job/42", "parts", "valve-3")

An event names a blob (a photo, a document: bytes `Client.put_blob` stored) by the value
`blob_reference` makes of what `put_blob` returned::

    Event.edit("job/42", {"photo": blob_reference(db.put_blob(jpeg), "image/jpeg")})
"""
import os
import time
from typing import Any, Dict, Mapping, Optional

__all__ = ["Event", "blob_reference", "new_ulid", "new_entity_id"]

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_ulid() -> str:
    """A fresh ULID (26 characters of Crockford base32): 48 bits of this machine's clock
    in milliseconds, then 80 random bits."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


def new_entity_id(type: str) -> str:
    """A fresh entity id, ``TYPE/ULID``, as ``evctl new TYPE`` prints it."""
    return f"{type}/{new_ulid()}"


def blob_reference(result: Mapping[str, Any], type: Optional[str] = None) -> Dict[str, Any]:
    """The value by which an event names a blob, a field's value or a set's element:
    ``{"$blob": "sha256:<hex>", "size": N, "type": type}``, from what `Client.put_blob`
    returned (or `Client.blob_stat` of a blob present), ``type`` left out when None.

    The daemon refuses an ``edit`` or ``add`` that names a blob it does not hold, or says
    another size than the blob's (`InvalidEvent`): put the blob on the node first.

    Args:
        result: ``{"hash", "size", ...}``.
        type: the blob's media type, such as ``"image/jpeg"`` (1 to 255 bytes without
            control characters).
    """
    hash = result.get("hash")
    size = result.get("size")
    if not isinstance(hash, str) or isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError("a blob reference is made of a blob's \"hash\" and \"size\", as put_blob returns them")
    if type is not None and not isinstance(type, str):
        raise TypeError("type is a media type (a str), such as \"image/jpeg\"")
    reference: Dict[str, Any] = {"$blob": hash, "size": size}
    if type is not None:
        reference["type"] = type
    return reference


class Event(Dict[str, Any]):
    """An event in the input form: a dict, built by the class methods below.

    Each takes the optional members every event may have: ``key`` (an idempotency key:
    an event whose key the node has seen is not appended again, the id of the first is
    returned in its place), ``by`` (the actor), ``at`` (the client's time, kept as
    given) and ``if_match`` (the entity's ``rev`` last read, an int: the append is a
    `Conflict` when the entity changed on this node since). Members left None are not sent.
    """

    @classmethod
    def _make(
        cls,
        entity: str,
        kind: str,
        members: Mapping[str, Any],
        key: Optional[str],
        by: Optional[str],
        at: Any,
        if_match: Optional[int],
    ) -> "Event":
        event = cls(entity=entity, kind=kind)
        event.update(members)
        for name, value in (("key", key), ("by", by), ("at", at), ("if_match", if_match)):
            if value is not None:
                event[name] = value
        return event

    @classmethod
    def status(
        cls,
        entity: str,
        status: str,
        *,
        key: Optional[str] = None,
        by: Optional[str] = None,
        at: Any = None,
        if_match: Optional[int] = None,
    ) -> "Event":
        """A new current status of ``entity``; its history keeps every one."""
        return cls._make(entity, "status", {"status": status}, key, by, at, if_match)

    @classmethod
    def edit(
        cls,
        entity: str,
        fields: Mapping[str, Any],
        *,
        key: Optional[str] = None,
        by: Optional[str] = None,
        at: Any = None,
        if_match: Optional[int] = None,
        resolve: bool = False,
    ) -> "Event":
        """Sets ``fields`` of ``entity`` (any JSON values; None clears a field).

        An edit of a field in conflict joins the conflict as one more competing value,
        unless it is a resolution: ``resolve=True`` (what `Client.resolve` sends), or an
        ``if_match`` that matches. A resolution supersedes every competing value.
        """
        members: Dict[str, Any] = {"fields": dict(fields)}
        if resolve:
            members["resolve"] = True
        return cls._make(entity, "edit", members, key, by, at, if_match)

    @classmethod
    def add(
        cls,
        entity: str,
        set: str,
        element: Any,
        *,
        key: Optional[str] = None,
        by: Optional[str] = None,
        at: Any = None,
        if_match: Optional[int] = None,
    ) -> "Event":
        """Adds ``element`` (any JSON value) to the set named ``set`` of ``entity``."""
        return cls._make(entity, "add", {"set": set, "element": element}, key, by, at, if_match)

    @classmethod
    def remove(
        cls,
        entity: str,
        set: str,
        element: Any,
        *,
        key: Optional[str] = None,
        by: Optional[str] = None,
        at: Any = None,
        if_match: Optional[int] = None,
    ) -> "Event":
        """Removes ``element`` from the set named ``set`` of ``entity`` (the adds seen so
        far; a concurrent add wins)."""
        return cls._make(entity, "remove", {"set": set, "element": element}, key, by, at, if_match)

    @classmethod
    def incr(
        cls,
        entity: str,
        counter: str,
        amount: int,
        *,
        key: Optional[str] = None,
        by: Optional[str] = None,
        at: Any = None,
        if_match: Optional[int] = None,
    ) -> "Event":
        """Adds ``amount`` (an integer; negative subtracts) to the counter named ``counter``
        of ``entity``. Counters merge by addition: concurrent increments never conflict."""
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise TypeError("amount must be an int")
        return cls._make(entity, "incr", {"counter": counter, "amount": amount}, key, by, at, if_match)

    @classmethod
    def delete(
        cls,
        entity: str,
        *,
        key: Optional[str] = None,
        by: Optional[str] = None,
        at: Any = None,
        if_match: Optional[int] = None,
    ) -> "Event":
        """Deletes ``entity``; appends to it other than `restore` are then refused."""
        return cls._make(entity, "delete", {}, key, by, at, if_match)

    @classmethod
    def restore(
        cls,
        entity: str,
        *,
        key: Optional[str] = None,
        by: Optional[str] = None,
        at: Any = None,
        if_match: Optional[int] = None,
    ) -> "Event":
        """Undoes the deletes of ``entity`` seen so far."""
        return cls._make(entity, "restore", {}, key, by, at, if_match)
