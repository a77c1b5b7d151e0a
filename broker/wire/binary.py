"""Reading and writing the little-endian fields of the binary formats (wire-protocol §7).

`BinaryReader` takes fields off a body and names what it was reading when the body runs out, so
a malformed body is a 400 that says where (`binary push: groups[1].items[0].payload needs
5000 bytes at byte 61, only 12 are left`). `BinaryWriter` builds an answer.

Field names are composed only when something fails: a loop sets `where` (a format string
and its arguments, e.g. `("groups[{}].items[{}].", g, i)`) and reads fields by their short
names, so a well-formed body pays for no error text.
"""

from __future__ import annotations

import struct

from core.errors import BadRequest

BINARY_MEDIA_TYPE = "application/x-queen-push"  # request bodies of push and transaction
FRAMED_POP_MEDIA_TYPE = "application/x-queen-pop"

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")


def media_type(content_type: str) -> str:
    """`Application/X-Queen-Push; charset=x` -> `application/x-queen-push`."""
    return content_type.split(";", 1)[0].strip().lower()


class BinaryReader:
    """Fields off `data`, front to back."""

    __slots__ = ("data", "pos", "subject", "where")

    def __init__(self, data: bytes, subject: str) -> None:
        self.data = data
        self.pos = 0
        self.subject = subject  # "binary push", "binary transaction"
        self.where: tuple[object, ...] = ("",)  # prefix of field names: format, arguments

    def fail(self, text: str) -> BadRequest:
        """An error about the field named `text`'s first word, prefixed with `where`."""
        template = str(self.where[0])
        return BadRequest(f"{self.subject}: {template.format(*self.where[1:])}{text}")

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def _need(self, size: int, field: str, part: str = "") -> int:
        start = self.pos
        if size > len(self.data) - start:
            raise self.fail(f"{field}{part} needs {size} bytes at byte {start}, only "
                            f"{len(self.data) - start} are left")
        self.pos = start + size
        return start

    def take(self, size: int, field: str) -> bytes:
        start = self._need(size, field)
        return self.data[start:self.pos]

    def u8(self, field: str) -> int:
        return self.data[self._need(1, field)]

    def u32(self, field: str) -> int:
        value: int = _U32.unpack_from(self.data, self._need(4, field))[0]
        return value

    def text16(self, field: str) -> str:
        """`str16`: u16 byte length, then UTF-8."""
        start = self._need(2, field, " length")
        raw = self.take(_U16.unpack_from(self.data, start)[0], field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"{field} is not valid UTF-8 (byte {exc.start})") from None

    def blob32(self, field: str) -> bytes:
        """`blob32`: u32 byte length, then the bytes."""
        size: int = _U32.unpack_from(self.data, self._need(4, field, " length"))[0]
        return self.take(size, field)

    def count(self, field: str, min_bytes_each: int) -> int:
        """A u32 count of things that take at least `min_bytes_each` bytes each: refused at
        once when they cannot fit in what is left, before anything loops over them."""
        n = self.u32(field)
        if n * min_bytes_each > self.left:
            raise self.fail(f"{field} is {n}, but only {self.left} bytes are left "
                            f"(at least {min_bytes_each} each)")
        return n

    def end(self, what: str = "the end") -> None:
        if self.left:
            raise BadRequest(f"{self.subject}: {self.left} unexpected bytes after {what}, "
                             f"at byte {self.pos}")


class BinaryWriter:
    """An answer built front to back."""

    __slots__ = ("parts",)

    def __init__(self, *start: bytes) -> None:
        self.parts: list[bytes] = list(start)

    def u8(self, value: int) -> None:
        self.parts.append(bytes((value,)))

    def u32(self, value: int) -> None:
        self.parts.append(_U32.pack(value))

    def u64(self, value: int) -> None:
        self.parts.append(_U64.pack(value))

    def i64(self, value: int) -> None:
        self.parts.append(_I64.pack(value))

    def text16(self, value: str) -> None:
        raw = value.encode("utf-8")
        self.parts += (_U16.pack(len(raw)), raw)

    def blob32(self, value: bytes) -> None:
        self.parts += (_U32.pack(len(value)), value)

    def bytes(self) -> bytes:
        return b"".join(self.parts)
