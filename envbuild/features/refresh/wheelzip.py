"""Pure: the METADATA member inside a wheel zip, found from the bytes of its tail and central
directory (so a fetcher reads a wheel by range, not whole)."""

from __future__ import annotations


def zip_directory_span(tail: bytes, size: int) -> tuple[int, int] | None:
    """(offset, length) of the central directory from the last bytes of a zip of ``size`` bytes
    (the end-of-central-directory record); None for zip64 archives or a tail without one."""
    import struct

    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) < at + 22:
        return None
    cd_size, cd_offset = struct.unpack_from("<II", tail, at + 12)
    if cd_offset == 0xFFFFFFFF or cd_size == 0xFFFFFFFF or cd_offset + cd_size > size:
        return None
    return cd_offset, cd_size


def zip_metadata_entry(directory: bytes) -> tuple[int, int, int] | None:
    """(local header offset, compressed size, method) of the top-level ``*.dist-info/METADATA``."""
    import struct

    at = 0
    while at + 46 <= len(directory) and directory[at:at + 4] == b"PK\x01\x02":
        method, = struct.unpack_from("<H", directory, at + 10)
        csize, = struct.unpack_from("<I", directory, at + 20)
        nlen, elen, clen = struct.unpack_from("<HHH", directory, at + 28)
        offset, = struct.unpack_from("<I", directory, at + 42)
        name = directory[at + 46:at + 46 + nlen].decode("utf-8", "replace")
        parts = name.split("/")
        if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "METADATA":
            return offset, csize, method
        at += 46 + nlen + elen + clen
    return None


def zip_member(local: bytes, csize: int, method: int) -> bytes | None:
    """The uncompressed member from its local header onwards (stored or deflated)."""
    import struct
    import zlib

    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        return None
    nlen, elen = struct.unpack_from("<HH", local, 26)
    data = local[30 + nlen + elen:30 + nlen + elen + csize]
    if len(data) < csize:
        return None
    if method == 0:
        return data
    if method == 8:
        try:
            return zlib.decompressobj(-15).decompress(data)
        except zlib.error:
            return None
    return None


