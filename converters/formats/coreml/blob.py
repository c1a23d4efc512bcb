"""Core ML's weight file (``Data/com.apple.CoreML/weights/weight.bin``), written by streaming each constant
straight from the array that holds it: no copy of a contiguous array, one bounded slab at a time of any other.

The format (MIL blob storage, version 2; docs/conventions.md §5, "The weight file"), all integers
little-endian, every record 64 bytes and every record and every blob's data starting at a multiple of 64::

    header    u32 count (blobs in the file), u32 version = 2, 7 x u64 reserved = 0
    per blob  metadata: u32 sentinel 0xDEADBEEF, u32 data type (``DATA_TYPES``), u64 size of the data in bytes,
              u64 offset of the data (= the metadata's offset + 64), u64 padding in bits (sub-byte types: the
              unused high bits of the last byte), 4 x u64 reserved = 0;
              then the data, the array's elements in row-major order; a sub-byte type (int4, uint1 ... uint6)
              packed, each element's low bits (two's complement for int4) in turn from the least significant bit
              of the first byte up, an element crossing a byte boundary where its width does not divide 8;
              then zeros up to the next multiple of 64, before the next blob's metadata (none after the last).

A program's constant names its blob by the *metadata's* offset (``BlobFileValue.offset``). The file is what
coremltools' own writer (``BlobWriter``) produces for the same arrays in the same order, byte for byte.
"""

from __future__ import annotations

import struct
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Iterator

import numpy as np

ALIGNMENT = 64
VERSION = 2
SENTINEL = 0xDEADBEEF
_RECORD = struct.Struct("<II7Q")  # the header and a blob's metadata have the same layout: two u32, seven u64
# the element types a blob holds, by NumPy type, as the format numbers them (8-bit float types, which gatepack never
# writes, are left out; sub-byte types in SUB_BYTE_TYPES)
DATA_TYPES = {
    np.dtype(np.float16): 1,
    np.dtype(np.float32): 2,
    np.dtype(np.uint8): 3,
    np.dtype(np.int8): 4,
    np.dtype(np.int16): 6,
    np.dtype(np.uint16): 7,
    np.dtype(np.int32): 14,
    np.dtype(np.uint32): 15,
}
# MIL's sub-byte types, held in int8 or uint8 arrays and packed in the file: name -> (data type, bits per element)
SUB_BYTE_TYPES = {
    "int4": (8, 4), "uint1": (9, 1), "uint2": (10, 2), "uint4": (11, 4), "uint3": (12, 3), "uint6": (13, 6)
}  # fmt: skip
SLAB_BYTES = 1 << 24  # a non-contiguous array is written in contiguous slabs of about this size


class BlobFile:
    """``weight.bin`` at ``path``, created with its header on the first ``append`` (a program without blobs leaves
    no file, as coremltools leaves none), the header's count written when the file is closed."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.count = 0
        self._file: BinaryIO | None = None
        self._end = 0  # bytes written so far

    def append(self, value: np.ndarray, sub_byte: str | None = None) -> int:
        """Write ``value`` as the next blob (``sub_byte``: the MIL type, in ``SUB_BYTE_TYPES``, its int8 or uint8
        elements are packed as); return the offset of its metadata, which the program's constant names."""
        if sub_byte is not None:
            code, bits = SUB_BYTE_TYPES[sub_byte]
            size = (value.size * bits + 7) // 8
            slabs, padding = _packed_slabs(value, bits), size * 8 - value.size * bits
        else:
            code = DATA_TYPES.get(value.dtype)  # type: ignore[assignment]
            if code is None:
                raise TypeError(f"a Core ML weight blob holds {sorted(map(str, DATA_TYPES))}, not {value.dtype}")
            size, slabs, padding = value.nbytes, _slabs(value), 0
        if self._file is None:
            self._file = open(self.path, "wb")  # noqa: SIM115  (closed by close())
            self._write(_RECORD.pack(0, VERSION, *[0] * 7))
        self._write(bytes(-self._end % ALIGNMENT))
        offset = self._end
        self._write(_RECORD.pack(SENTINEL, code, size, offset + ALIGNMENT, padding, 0, 0, 0, 0))
        for slab in slabs:
            self._write(slab)
        self.count += 1
        return offset

    def _write(self, data: bytes | memoryview) -> None:
        assert self._file is not None
        self._end += self._file.write(data)

    def close(self) -> None:
        """The header's count written; the file closed."""
        if self._file is None:
            return
        self._file.seek(0)
        self._file.write(_RECORD.pack(self.count, VERSION, *[0] * 7))
        self._file.close()
        self._file = None

    def __enter__(self) -> "BlobFile":
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def _slabs(value: np.ndarray) -> Iterator[memoryview]:
    """``value``'s bytes in row-major order: the array's own memory when it is C-contiguous, else contiguous copies
    of consecutive slabs along its first axis, each about ``SLAB_BYTES``."""
    if value.flags.c_contiguous:
        yield value.reshape(-1).data.cast("B")
        return
    rows = max(1, SLAB_BYTES // max(1, value[0].nbytes))
    for start in range(0, value.shape[0], rows):
        yield np.ascontiguousarray(value[start : start + rows]).reshape(-1).data.cast("B")


def _packed_slabs(value: np.ndarray, bits: int) -> Iterator[memoryview]:
    """``value``'s elements in row-major order, each one's low ``bits`` bits packed little-end first (the blob
    file's sub-byte form), in slabs of ``SLAB_BYTES // 8`` elements (a multiple of 8: whole bytes; the unpacked
    bits of a slab take at most ``SLAB_BYTES``)."""
    flat = value.reshape(-1)
    step = SLAB_BYTES // 8
    for start in range(0, flat.size, step):
        low = flat[start : start + step].view(np.uint8) & np.uint8((1 << bits) - 1)  # int4: two's complement bits
        planes = np.unpackbits(low[:, None], axis=1, count=bits, bitorder="little")
        yield np.packbits(planes.reshape(-1), bitorder="little").data.cast("B")
