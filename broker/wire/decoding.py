"""Decoding bodies, query strings and path parameters into Structs, with errors that name
the field: `items[1].queue must be a string`, `batch must be at least 1`.

msgspec reports the first problem with its JSON path; this module turns that report into
the broker's wording. A Struct may override the text for a field that is missing or of the
wrong type (`MESSAGES`, e.g. push's fixed `items array is required`, wire-protocol §4.1).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from broker.wire.types import dec_hook
from core.errors import BadRequest, Refused

T = TypeVar("T")

_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_EXPECTED = re.compile(r"^Expected `(?P<want>[^`]+)`(?P<rest>.*?)(?:, got `(?P<got>\w+)`)?$")
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]+)`$")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<field>[^`]+)`$")
_BOUND = re.compile(r"^ (?P<op>>=|<=|>|<) (?P<n>-?\d+)$")
_LENGTH = re.compile(r"^ of length (?P<op>>=|<=) (?P<n>\d+)$")
_ARTICLE = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false",
            "object": "an object", "array": "an array", "null": "null"}
_PATH_TOKEN = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
# A high surrogate's escape without the low one's after it: msgspec calls that truncation.
_LONE_HIGH_SURROGATE = re.compile(
    rb"(?<!\\)(?:\\\\)*(\\u[dD][89abAB][0-9a-fA-F]{2})(?!\\u)")


def _decoder(kind: Any) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(kind, dec_hook=dec_hook)


_DECODERS: dict[Any, msgspec.json.Decoder[Any]] = {}
_DOCUMENT = msgspec.json.Decoder(msgspec.Raw)


_VALUES = msgspec.json.Decoder()

# Python turns at most this many digits into an int (sys.int_info.default_max_str_digits,
# since 3.11), and its json.loads, through which the official client reads a pop's answer,
# refuses a whole answer holding a longer integer. msgspec refuses the same integers.
MAX_INTEGER_DIGITS = 4300
# A run of MAX_INTEGER_DIGITS + 1 digits covers at least _SAMPLES_IN_A_RUN neighbouring
# bytes among every _SAMPLE_STEP-th byte of the document. Looking at those samples only (a
# push of 100 messages of 1 KB: 1.7 KB of them) finds every such run; a run that long of
# digits otherwise is rare enough (a string of digits) to be told apart by a full decode.
_SAMPLE_STEP = 64
_SAMPLES_IN_A_RUN = (MAX_INTEGER_DIGITS + 1) // _SAMPLE_STEP
_DIGITS_AS_NINES = bytes(0x39 if 0x30 <= b <= 0x39 else 0x2E for b in range(256))
_RUN_OF_NINES = b"9" * _SAMPLES_IN_A_RUN
_OUT_OF_RANGE = "Integer value out of range"


def may_hold_a_long_integer(doc: bytes) -> bool:
    """Whether `doc` may hold an integer of more than MAX_INTEGER_DIGITS digits (or holds a
    string of about as many digits); the cheap look that spares other documents a full
    decode."""
    return (len(doc) > MAX_INTEGER_DIGITS
            and _RUN_OF_NINES in doc[::_SAMPLE_STEP].translate(_DIGITS_AS_NINES))


def long_integer_refusal(doc: bytes) -> str | None:
    """Why `doc` (valid JSON) cannot be stored, if it holds an integer of more than
    MAX_INTEGER_DIGITS digits: a consumer in Python could decode no pop answer holding it,
    so one such message would stop its partition for that consumer (each pop failing, the
    messages beside it delivered again until they are dead-lettered). None otherwise."""
    if not may_hold_a_long_integer(doc):
        return None
    try:
        _VALUES.decode(doc)
    except msgspec.DecodeError as exc:
        # (msgspec's path names no key of an object, so it is not repeated here.)
        if str(exc).startswith(_OUT_OF_RANGE):
            return (f"an integer of more than {MAX_INTEGER_DIGITS} digits, more than "
                    f"Python's JSON decoding (the official client's) takes: send it as a "
                    f"string")
    except RecursionError:
        pass  # the callers' own decoding words that
    return None


def decode_values(raw: bytes, code: str, reason: str,
                  decoder: msgspec.json.Decoder[Any] = _VALUES) -> Any:
    """A body as plain JSON values, for the routes that check their bodies themselves and
    refuse with codes of their own (KV and locks, extensions §14.4 and §15.2; timers,
    §16.2): one that is not a JSON document is refused with `code` and `reason`."""
    try:
        return decoder.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        raise Refused(code, reason, "the body is not a JSON document") from None


def _refuse_long_integers(doc: bytes, error: type[Exception], prefix: str) -> None:
    """Raise `error(prefix + why)` when `doc` holds an integer too long to store."""
    if (refusal := long_integer_refusal(doc)) is not None:
        raise error(prefix + refusal)


def check_document(data: bytes) -> None:
    """One JSON document in UTF-8, as a payload must be (the rule `decode_body` applies to
    payloads inside a JSON body); raises ValueError with the reason."""
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"is not valid UTF-8 (byte {exc.start})") from None
    try:
        _DOCUMENT.decode(data)
    except msgspec.DecodeError as exc:
        raise ValueError(f"is not valid JSON: {_malformed(exc, data)}") from None
    except RecursionError:
        raise ValueError("is JSON nested too deeply") from None
    _refuse_long_integers(data, ValueError, "holds ")


def decode_body(body: bytes, kind: type[T]) -> T:
    """A JSON body as `kind`; a missing or empty body counts as `{}` (wire-protocol §1)."""
    try:
        # JSON is UTF-8. msgspec checks the strings it decodes but not the bytes of a
        # payload it keeps raw, and a stored invalid byte would poison every later pop.
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"bad body: invalid UTF-8 at byte {exc.start}") from None
    decoder = _DECODERS.get(kind)
    if decoder is None:
        decoder = _DECODERS[kind] = _decoder(kind)
    try:
        value: T = decoder.decode(body or b"{}")
    except msgspec.ValidationError as exc:
        raise BadRequest(explain(str(exc), kind)) from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"bad body: {_malformed(exc, body)}") from None
    except RecursionError:
        # msgspec walks nested arrays/objects recursively, even inside a Raw payload.
        raise BadRequest("bad body: JSON is nested too deeply") from None
    _refuse_long_integers(body, BadRequest, "bad body: ")  # a raw payload's numbers
    return value


def _malformed(exc: msgspec.DecodeError, data: bytes) -> str:
    """msgspec's reason a document is not JSON, except where it names the wrong problem."""
    if str(exc) == "Input data was truncated":
        lone = _LONE_HIGH_SURROGATE.search(data)
        if lone is not None:
            return (f"JSON is malformed: the escape {lone.group(1).decode()} at byte "
                    f"{lone.start(1)} is half of a surrogate pair without its other half")
    return str(exc)


def decode_strings(values: Mapping[str, str], kind: type[T]) -> T:
    """Query or path parameters (all strings) as `kind`; empty values count as absent."""
    given = {k: v for k, v in values.items() if v != ""}
    try:
        return msgspec.convert(given, kind, strict=False, dec_hook=dec_hook)
    except msgspec.ValidationError as exc:
        raise BadRequest(explain(str(exc), kind)) from None


def explain(report: str, root: Any) -> str:
    """msgspec's validation report in the broker's words, naming the field."""
    match = _AT.match(report)
    assert match is not None
    what, raw_path = match.group("what"), match.group("path") or ""
    unknown = _UNKNOWN.match(what)
    if unknown:
        # A Struct that refuses unknown keys may word the refusal (`UNKNOWN_FIELD`).
        name = unknown.group("field")
        word = getattr(root, "UNKNOWN_FIELD", None)
        return word(name) if word else f"{(raw_path + '.' + name).lstrip('.')} is not a known field"
    missing = _MISSING.match(what)
    if missing:
        raw_path += "." + missing.group("field")
    field = raw_path.lstrip(".")
    where = _describe_path(raw_path)
    overrides: Mapping[str, str] = getattr(root, "MESSAGES", {})
    expected = _EXPECTED.match(what)
    if not field:
        return f"bad body: {report}"
    kind_error = missing is not None or what == "must be a string" or (
        expected is not None and expected.group("got") is not None)
    if (kind_error or what.startswith("Invalid enum value")) and field in overrides:
        return overrides[field]
    if missing or (expected and expected.group("got") == "null"):
        return f"{field} is required"
    if expected:
        want, rest, got = expected.group("want"), expected.group("rest"), expected.group("got")
        if got is not None:
            return f"{field} must be {' or '.join(_ARTICLE.get(w, w) for w in want.split(' | '))}"
        bound = _BOUND.match(rest)
        if bound:
            return f"{field} must be {_range_text(root, where, bound.group('op'), bound.group('n'))}"
        length = _LENGTH.match(rest)
        if length:
            unit = "items" if want == "array" else "characters"
            word = "at most" if length.group("op") == "<=" else "at least"
            return f"{field} must have {word} {length.group('n')} {unit}"
    if what.startswith(("Invalid enum value", "Invalid value")):
        return f"{field} has an unknown value: {what.split('value', 1)[1].strip()}"
    if field and not what.startswith("Expected"):
        return f"{field} {what}"  # our own checks: `items[0].queue contains control characters`
    return f"bad body: {report}"


def _describe_path(raw: str) -> list[str | int]:
    return [name if name else int(index) for name, index in _PATH_TOKEN.findall(raw)]


def _range_text(root: Any, path: list[str | int], op: str, number: str) -> str:
    """`between 1 and 100` when the field has both bounds, else the bound that failed."""
    info = _field_type(msgspec.inspect.type_info(root), path)
    low = getattr(info, "ge", None)
    high = getattr(info, "le", None)
    if low is not None and high is not None:
        return f"between {low} and {high}"
    return {">=": "at least", "<=": "at most", ">": "more than", "<": "less than"}[op] \
        + f" {number}"


def _field_type(info: Any, path: list[str | int]) -> Any:
    for step in path:
        info = _plain(info)
        if isinstance(step, int):
            info = getattr(info, "item_type", None)
        elif isinstance(info, msgspec.inspect.StructType):
            info = next((f.type for f in info.fields if f.encode_name == step), None)
        else:
            return None
    return _plain(info)


def _plain(info: Any) -> Any:
    """The type under a union with None and under documentation metadata (a field whose
    Meta has a description is inspected as Metadata around its type)."""
    while isinstance(info, msgspec.inspect.UnionType | msgspec.inspect.Metadata):
        if isinstance(info, msgspec.inspect.Metadata):
            info = info.type
        else:
            info = next((t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)),
                        None)
    return info
