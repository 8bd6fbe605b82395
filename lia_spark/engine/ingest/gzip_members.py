"""Decoding a gzip day as ``gzip -d`` decodes it: every member in turn, then the bytes after the last complete
member: zero bytes to the end (padding, e.g. of a tape or block device) are ignored silently, any other bytes are
trailing garbage, ignored with a warning ("decompression OK, trailing garbage ignored"); bytes that start a member
(the gzip magic) but do not decode to its end are damage (a truncated or corrupt member, as is a file that does not
start with a member), and the text decoded before the damage is kept.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Iterator

GZIP_MAGIC = b"\x1f\x8b"  # the first two bytes of every gzip member (RFC 1952)
_GZIP_WBITS = 31  # zlib's window bits for one gzip member: header and trailer
_OUTPUT_CHUNK = 8 << 20  # decoded bytes per decoder call: memory stays bounded


@dataclasses.dataclass(frozen=True)
class GzipDecode:
    """How a gzip file decoded: the text's bytes, its complete members, the bytes after the last complete member
    that were ignored (``trailing_zeros``: all of them zero) and the damage that stopped the decode ("" for none)."""

    decoded: int
    members: int
    trailing: int = 0
    trailing_zeros: bool = True
    damage: str = ""

    def garbage_warning(self, path: str) -> str | None:
        """What ``gzip -d`` warns for trailing bytes that are not zero padding (naming ``path`` and their count), or
        None."""
        if not self.trailing or self.trailing_zeros:
            return None
        return (f"{path}: decompression OK, trailing garbage ignored: {self.trailing:,} byte(s) after the last of "
                f"its {self.members} gzip member(s), as gzip -d ignores them; its lines are all kept")


def _decoder_module():
    """ISA-L's zlib (about twice the rate) where installed, else Python's zlib: the same API."""
    try:
        from isal import isal_zlib
        return isal_zlib
    except ImportError:  # pragma: no cover - isal is a dependency; zlib decodes the same bytes
        import zlib
        return zlib


def decode_members(chunks: Iterable[bytes], write: Callable[[bytes], object] = lambda text: None) -> GzipDecode:
    """Decode the gzip file whose bytes are ``chunks`` (in order), handing its text to ``write`` piece by piece, as
    the module docstring says: every member, then the bytes after the last one classified."""
    return _MemberDecoder(iter(chunks), write).decode()


class _EndInsideMember(Exception):
    """The bytes ended before the member being decoded did."""


@dataclasses.dataclass
class _MemberDecoder:
    """The state of :func:`decode_members`: the bytes still to read, and the text bytes and members decoded."""

    stream: Iterator[bytes]
    write: Callable[[bytes], object]
    decoded: int = 0
    members: int = 0

    def decode(self) -> GzipDecode:
        codec = _decoder_module()
        pending = b""
        try:
            while True:
                while len(pending) < len(GZIP_MAGIC) and (more := next(self.stream, b"")):
                    pending += more  # a member boundary: enough bytes to tell the magic
                if not pending:
                    return GzipDecode(self.decoded, self.members)
                if not pending.startswith(GZIP_MAGIC):
                    if not self.members:
                        return GzipDecode(0, 0, damage="not in gzip format (no gzip member at its start)")
                    return self._trailing(pending)
                pending = self._member(codec, pending)
                self.members += 1
        except _EndInsideMember:
            return GzipDecode(self.decoded, self.members, damage="the file ends inside a gzip member (truncated)")
        except codec.error as error:
            return GzipDecode(self.decoded, self.members, damage=f"corrupt gzip data: {error}")

    def _member(self, codec, data: bytes) -> bytes:
        """Decode the member that starts ``data`` (reading on as needed); the bytes after it."""
        decoder = codec.decompressobj(_GZIP_WBITS)
        while True:
            text = decoder.decompress(data, _OUTPUT_CHUNK)
            self.write(text)
            self.decoded += len(text)
            if decoder.eof:
                return decoder.unused_data
            data = decoder.unconsumed_tail
            if not data and len(text) < _OUTPUT_CHUNK:  # every byte consumed and no output left inside
                data = next(self.stream, b"")
                if not data:
                    raise _EndInsideMember()

    def _trailing(self, pending: bytes) -> GzipDecode:
        """The bytes after the last complete member (``pending``, then the rest): counted, and whether all are
        zero."""
        trailing, zeros = len(pending), not pending.strip(b"\0")
        for chunk in self.stream:
            trailing += len(chunk)
            zeros = zeros and not chunk.strip(b"\0")
        return GzipDecode(self.decoded, self.members, trailing=trailing, trailing_zeros=zeros)
