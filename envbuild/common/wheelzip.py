"""What can be read of a zip archive (a wheel) from a few byte ranges, without the whole file:
where its central directory is (from the end-of-central-directory record, zip64 too), the
entries of that directory, and one member from its local header on. Pure: bytes in, values
out; what is not a zip gives ValueError (directory_span) or None (member)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import NamedTuple

_FULL32 = 0xFFFFFFFF


class Entry(NamedTuple):
    name: bytes
    method: int  # 0 stored, 8 deflated
    compressed: int
    uncompressed: int
    offset: int  # of its local header


def directory_span(tail: bytes, tail_start: int) -> tuple[int, int]:
    """(offset, size) of the central directory from the last bytes of a zip (`tail`, which
    starts at byte `tail_start` of the file); the zip64 record when the 32-bit fields are full."""
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + 22 > len(tail):
        raise ValueError("no zip end-of-central-directory record in the wheel's tail")
    size, offset = struct.unpack_from("<II", tail, at + 12)
    if offset == _FULL32 or size == _FULL32:
        loc = tail.rfind(b"PK\x06\x07", 0, at)
        if loc < 0 or loc + 16 > len(tail):
            raise ValueError("zip64 wheel without a zip64 locator")
        rec, = struct.unpack_from("<Q", tail, loc + 8)
        r = rec - tail_start
        if r < 0 or r + 56 > len(tail) or tail[r:r + 4] != b"PK\x06\x06":
            raise ValueError("zip64 record outside the wheel's tail")
        size, offset = struct.unpack_from("<QQ", tail, r + 40)
    return offset, size


def entries(directory: bytes) -> Iterator[Entry]:
    """The central directory's entries, with the zip64 extra field's sizes and offset where
    the 32-bit ones are full."""
    i = 0
    while i + 46 <= len(directory) and directory[i:i + 4] == b"PK\x01\x02":
        method, = struct.unpack_from("<H", directory, i + 10)
        csize, usize = struct.unpack_from("<II", directory, i + 20)
        nlen, xlen, clen = struct.unpack_from("<HHH", directory, i + 28)
        offset, = struct.unpack_from("<I", directory, i + 42)
        name = directory[i + 46:i + 46 + nlen]
        if _FULL32 in (usize, csize, offset):
            usize, csize, offset = _zip64(directory[i + 46 + nlen:i + 46 + nlen + xlen],
                                          usize, csize, offset)
        yield Entry(name, method, csize, usize, offset)
        i += 46 + nlen + xlen + clen


def _zip64(extra: bytes, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    """The zip64 extra field (id 1) holds, in this order, each of the three that is full."""
    j = 0
    while j + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, j)
        if tag == 1:
            body, k = extra[j + 4:j + 4 + size], 0
            values = [usize, csize, offset]
            for n, v in enumerate(values):
                if v == _FULL32 and k + 8 <= len(body):
                    values[n], = struct.unpack_from("<Q", body, k)
                    k += 8
            return values[0], values[1], values[2]
        j += 4 + size
    return usize, csize, offset


def member(local: bytes, compressed: int, method: int) -> bytes | None:
    """The uncompressed member from its local header on (stored or deflated); None when the
    bytes do not hold it whole or the method is another."""
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        return None
    nlen, elen = struct.unpack_from("<HH", local, 26)
    data = local[30 + nlen + elen:30 + nlen + elen + compressed]
    if len(data) < compressed:
        return None
    if method == 0:
        return data
    if method == 8:
        try:
            return zlib.decompressobj(-15).decompress(data)
        except zlib.error:
            return None
    return None
