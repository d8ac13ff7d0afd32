"""PNG chunks with bad checksums: `mend(data)` drops the ancillary ones, `damage(data)` says
what is wrong with the rest.

Pillow refuses a PNG whose any chunk before the image data has a bad CRC, unless its global
`ImageFile.LOAD_TRUNCATED_IMAGES` is set (which we leave alone: it also lets truncated
pixels through). The PNG specification lets a decoder ignore an ancillary chunk (a lower-case
first letter: text, time, colour hints) it cannot use, and images in the wild carry damaged
ones: the reference MCP "everything" server's sample image has one. Dropping such a chunk
changes nothing of the picture; a damaged critical chunk (IHDR, PLTE, IDAT, IEND) still
makes the image unreadable, and is reported as such.
"""

from __future__ import annotations

import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunks(data: bytes):
    """(start, end, type, intact) of each whole chunk after the signature, in order."""
    pos = len(SIGNATURE)
    while pos + 12 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        end = pos + 12 + length
        if end > len(data):
            return
        (crc,) = struct.unpack(">I", data[end - 4:end])
        yield pos, end, kind, zlib.crc32(data[pos + 4:end - 4]) == crc
        pos = end


def _ancillary(kind: bytes) -> bool:
    return bool(kind[0] & 0x20)


def mend(data: bytes) -> bytes:
    """`data` without its ancillary chunks whose checksum is wrong; the same object when
    there is none (or it is no PNG)."""
    if not data.startswith(SIGNATURE):
        return data
    damaged = [(start, end) for start, end, kind, intact in _chunks(data) if not intact and _ancillary(kind)]
    if not damaged:
        return data
    kept, pos = [], 0
    for start, end in damaged:
        kept.append(data[pos:start])
        pos = end
    kept.append(data[pos:])
    return b"".join(kept)


def damage(data: bytes) -> str | None:
    """What is wrong with a PNG's structure, in words; None when nothing is found."""
    seen = False
    for _, _, kind, intact in _chunks(data):
        seen = True
        if not intact:
            return f"its {kind.decode('latin-1')} chunk has a bad checksum"
    return None if seen else "it ends before its first chunk"
