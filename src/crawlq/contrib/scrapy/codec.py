"""Scrapy requests to bytes and back, without pickle.

A stored Scrapy request is one msgpack map: the fields of
``scrapy.Request.to_dict`` that differ from their defaults, with callbacks
and errbacks as spider method names and a ``Request`` subclass as its import
path (``_class``), as Scrapy's own ``to_dict`` writes them. Values Scrapy
users put in ``meta`` and ``cb_kwargs`` that msgpack has no type for are
tagged with msgpack extension types so they come back as the same type:
tuple, set, frozenset, datetime, date, Decimal, a dict with keys msgpack
cannot hold, and ``scrapy.Item`` subclasses (by import path, which must name a
``scrapy.Item``). Anything else (a lambda callback, an arbitrary object in
``meta``) raises `Unserializable`, and the scheduler keeps that request in
memory instead.

Decoding never unpickles. The classes a payload names must be
``scrapy.Request`` or ``scrapy.Item`` subclasses, as in Scrapy's
``request_from_dict``, and their module is imported only if the crawl has
imported it already or it belongs to Scrapy or to the spider's package: a job
directory cannot make the crawler import, hence run, any other code.
"""

from __future__ import annotations

import datetime
import decimal
import sys
from collections.abc import Callable
from typing import Any, Final

import msgspec
import scrapy
from msgspec.msgpack import Ext
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.misc import load_object

from ..._errors import SerializationError

__all__ = ["RequestCodec", "Unserializable"]

#: Layout of the payload; a newer one is refused, not misread.
PAYLOAD_VERSION: Final = 1
_VERSION_KEY: Final = "v"

_TUPLE: Final = 1
_SET: Final = 2
_FROZENSET: Final = 3
_DATETIME: Final = 4
_DATE: Final = 5
_DECIMAL: Final = 6
_PAIRS: Final = 7  # a dict whose keys msgpack maps cannot hold
_ITEM: Final = 8

# Callback stand-in for scrapy.http.request.NO_CALLBACK; not a method name.
_NO_CALLBACK_NAME: Final = "scrapy:NO_CALLBACK"

_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1
_SCALARS: Final = frozenset({str, bytes, bool, float, type(None)})
_KEY_TYPES: Final = frozenset({str, bytes, int, float, bool, type(None)})

# Attributes of scrapy.Request and the value to_dict gives them by default;
# a payload leaves out every attribute at its default.
_DEFAULTS: Final[dict[str, Any]] = {
    "method": "GET",
    "headers": {},
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "priority": 0,
    "dont_filter": False,
    "flags": [],
    "cb_kwargs": {},
    "callback": None,
    "errback": None,
}
_PLAIN_ATTRIBUTES: Final = frozenset({"method", "body", "encoding", "priority", "dont_filter"})


class Unserializable(SerializationError):
    """A Scrapy request holds something this codec cannot store.

    The message names the field (and ``meta`` key) and the type. A subclass
    of `crawlq.SerializationError`, hence of ``ValueError``: Scrapy's stock
    scheduler falls back to its memory queue for it.
    """


_encoder: Final = msgspec.msgpack.Encoder()


def _decoders(spider: Any) -> msgspec.msgpack.Decoder[dict[str, Any]]:
    """A payload decoder whose tagged values that name classes resolve for ``spider``."""

    def ext_hook(code: int, data: memoryview) -> Any:
        value = inner.decode(data)
        if code == _TUPLE:
            return tuple(value)
        if code == _SET:
            return set(value)
        if code == _FROZENSET:
            return frozenset(value)
        if code == _DATETIME:
            return datetime.datetime.fromisoformat(value)
        if code == _DATE:
            return datetime.date.fromisoformat(value)
        if code == _DECIMAL:
            return decimal.Decimal(value)
        if code == _PAIRS:
            return {key: item for key, item in value}
        if code == _ITEM:
            path, fields = value
            return _load_class(path, scrapy.Item, spider)(fields)
        raise ValueError(f"unknown value tag {code} in a stored Scrapy request")

    inner: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(ext_hook=ext_hook)
    return msgspec.msgpack.Decoder(dict[str, Any], ext_hook=ext_hook)


def _pack(value: Any, where: str) -> Any:
    """Return ``value`` in a form msgpack stores and `_decoders` restores exactly."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise Unserializable(f"{where} holds an int too large for msgpack ({value})")
        return value
    if kind is dict:
        if all(type(key) in _KEY_TYPES for key in value):
            return {key: _pack(item, f"{where}[{key!r}]") for key, item in value.items()}
        pairs = [
            [_pack(key, where), _pack(item, f"{where}[{key!r}]")] for key, item in value.items()
        ]
        return Ext(_PAIRS, _encoder.encode(pairs))
    if kind is list:
        return [_pack(item, where) for item in value]
    if kind is tuple:
        return Ext(_TUPLE, _encoder.encode([_pack(item, where) for item in value]))
    if kind is set or kind is frozenset:
        code = _SET if kind is set else _FROZENSET
        return Ext(code, _encoder.encode([_pack(item, where) for item in value]))
    if kind is datetime.datetime:
        return Ext(_DATETIME, _encoder.encode(value.isoformat()))
    if kind is datetime.date:
        return Ext(_DATE, _encoder.encode(value.isoformat()))
    if kind is decimal.Decimal:
        return Ext(_DECIMAL, _encoder.encode(str(value)))
    if isinstance(value, scrapy.Item):
        path = f"{kind.__module__}.{kind.__qualname__}"
        return Ext(_ITEM, _encoder.encode([path, _pack(dict(value), where)]))
    raise Unserializable(
        f"{where} holds a {kind.__module__}.{kind.__qualname__}, which crawlq cannot store "
        "without pickle; keep meta and cb_kwargs to str, bytes, numbers, bool, None, "
        "list, tuple, set, dict, datetime, date, Decimal and scrapy.Item"
    )


_classes: dict[str, type] = {}
#: Packages whose modules a payload may name even if they are not imported yet.
_IMPORTABLE: Final = ("scrapy",)


def _load_class(path: str, base: type[Any], spider: Any) -> Any:
    """Return the ``base`` subclass at ``path``, importing only what is safe to.

    Stored data must not be able to make the crawler run code, so the module
    it names is imported only if it already is, or belongs to Scrapy or to
    the spider's own package (as a JOBDIR of Scrapy's would need anyway).
    Raises ValueError otherwise, or if the object is not a ``base`` subclass.
    """
    cls = _classes.get(path)
    if cls is None:
        module = path.rpartition(".")[0]
        allowed = {*_IMPORTABLE}
        if spider is not None:
            allowed.add(type(spider).__module__.partition(".")[0])
        if module not in sys.modules and module.partition(".")[0] not in allowed:
            raise ValueError(
                f"stored Scrapy request names {path!r}, from a module this crawl has not "
                "imported; crawlq imports only the spider's package and Scrapy for it"
            )
        loaded = load_object(path)
        if not (isinstance(loaded, type) and issubclass(loaded, base)):
            raise ValueError(f"{path!r} in a stored Scrapy request is not a {base.__name__} class")
        cls = _classes[path] = loaded
    return cls


class RequestCodec:
    """Encodes Scrapy requests of one spider to bytes, and decodes them back.

    Callbacks and errbacks must be methods of ``spider`` (or None, or
    ``NO_CALLBACK``); they are stored by name and looked up on the spider
    again when decoding, as Scrapy's JOBDIR does.
    """

    __slots__ = ("_decoder", "_method_names", "spider")

    def __init__(self, spider: scrapy.Spider | None) -> None:
        self.spider = spider
        self._decoder = _decoders(spider)
        # function -> the name of the spider method that wraps it.
        self._method_names: dict[Callable[..., Any], str] = {}

    def encode(self, request: scrapy.Request, *, with_url: bool = True) -> bytes:
        """Return the payload of ``request``; leave its URL out if ``with_url`` is False.

        Raises `Unserializable` naming the field that cannot be stored.
        """
        payload: dict[str, Any] = {_VERSION_KEY: PAYLOAD_VERSION}
        if with_url:
            payload["url"] = request.url
        cls = type(request)
        if cls is not scrapy.Request:
            payload["_class"] = f"{cls.__module__}.{cls.__qualname__}"
        for name in cls.attributes:
            if name == "url":
                continue
            if name == "headers":
                headers = request.headers
                if headers:
                    payload["headers"] = dict(headers)
                continue
            value = getattr(request, name)
            if name in _DEFAULTS and value == _DEFAULTS[name]:
                continue
            if name == "callback" or name == "errback":
                payload[name] = self._method_name(value, name)
            elif name in _PLAIN_ATTRIBUTES:
                payload[name] = value
            else:
                payload[name] = _pack(value, name)
        try:
            return _encoder.encode(payload)
        except (TypeError, ValueError, OverflowError) as exc:
            raise Unserializable(f"request {request.url} cannot be stored: {exc}") from None

    def decode(self, data: bytes, url: str) -> scrapy.Request:
        """Rebuild the Scrapy request from a payload; ``url`` is used if it holds none.

        Raises ValueError when the payload names a method the spider lacks, a
        class that is not a Scrapy request or item, or is not a payload at all.
        """
        try:
            payload = self._decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise ValueError(f"stored Scrapy request is unreadable: {exc}") from None
        version = payload.pop(_VERSION_KEY, None)
        if version != PAYLOAD_VERSION:
            raise ValueError(
                f"stored Scrapy request has payload version {version!r}; this crawlq reads "
                f"version {PAYLOAD_VERSION} (upgrade crawlq to resume this job)"
            )
        path = payload.pop("_class", None)
        cls = scrapy.Request if path is None else _load_class(path, scrapy.Request, self.spider)
        payload.setdefault("url", url)
        for name in ("callback", "errback"):
            value = payload.get(name)
            if value is not None:
                payload[name] = self._method(value)
        return cls(**payload)

    def _method_name(self, func: Any, field: str) -> str | None:
        if func is None:
            return None
        if func is NO_CALLBACK:
            return _NO_CALLBACK_NAME
        function = getattr(func, "__func__", None)
        spider = self.spider
        bound_to = getattr(func, "__self__", None)
        if function is not None and spider is not None and bound_to is spider:
            name = self._method_names.get(function)
            if name is not None:
                return name
            name = function.__name__
            bound = getattr(spider, name, None)
            if getattr(bound, "__func__", None) is not function:
                # Stored under another attribute name: search like to_dict does.
                name = next(
                    (
                        attribute
                        for attribute in dir(spider)
                        if getattr(getattr(spider, attribute, None), "__func__", None) is function
                    ),
                    "",
                )
            if name:
                self._method_names[function] = name
                return name
        raise Unserializable(
            f"{field} {func!r} is not a method of the spider; crawlq stores callbacks "
            "by method name, as Scrapy's JOBDIR does"
        )

    def _method(self, name: str) -> Any:
        if name == _NO_CALLBACK_NAME:
            return NO_CALLBACK
        method = getattr(self.spider, name, None)
        if method is None or not callable(method):
            raise ValueError(f"spider {self.spider!r} has no method {name!r} any more")
        return method
