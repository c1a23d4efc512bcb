"""Core ML's weight file (``Data/com.apple.CoreML/weights/weight.bin``), written by streaming each constant
straight from the array that holds it: no copy of a contiguous array, one bounded slab at a time of any other.

The format (MIL blob storage, version 2; docs/conventions.md §5, "The weight file"), all integers
little-endian, every record 64 bytes and every record and every blob's data starting at a multiple of 64::

    header    u32 count (blobs in the file), u32 version = 2, 7 x u64 reserved = 0
    per blob  metadata: u32 sentinel 0xDEADBEEF, u32 data type (``DATA_TYPES``), u64 size of the data in bytes,
              u64 offset of the data (= the metadata's offset + 64), u64 padding in bits (sub-byte types only:
              the bits of the last byte past the last element), 4 x u64 reserved = 0;
              then the data, the array's elements in row-major order (sub-byte types, ``SUB_BYTE_TYPES``: packed
              into bytes least significant bit first, an element's low bits in the low bits of its first byte,
              a signed one in two's complement; as coremltools' ``BlobWriter`` writes them, checked byte for byte);
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
# the element types a blob holds, by NumPy type, as the format numbers them (sub-byte and 8-bit float types, which
# gatepack never writes, are left out)
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
# the sub-byte element types, by MIL's name: (the format's number, bits an element); NumPy holds them in int8/uint8
SUB_BYTE_TYPES = {
    "int4": (8, 4),
    "uint1": (9, 1),
    "uint2": (10, 2),
    "uint4": (11, 4),
    "uint3": (12, 3),
    "uint6": (13, 6),
}
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
        """Write ``value`` as the next blob (``sub_byte``: the MIL type of its elements when it is one of
        ``SUB_BYTE_TYPES``, packed); return the offset of its metadata, which the program's constant names."""
        code, bits = SUB_BYTE_TYPES[sub_byte] if sub_byte is not None else (DATA_TYPES.get(value.dtype), 0)
        if code is None:
            raise TypeError(f"a Core ML weight blob holds {sorted(map(str, DATA_TYPES))}, not {value.dtype}")
        slabs = [packed_bits(value, bits)] if bits else list(_slabs(value))
        size = sum(len(slab) for slab in slabs)
        padding = 8 * size - value.size * bits if bits else 0
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


def packed_bits(value: np.ndarray, bits: int) -> memoryview:
    """``value``'s elements (integers of ``bits`` bits, two's complement when signed) packed into bytes in row-major
    order, least significant bit first (the module docstring's sub-byte layout)."""
    low = value.reshape(-1).astype(np.int64) & ((1 << bits) - 1)
    stream = ((low[:, None] >> np.arange(bits)) & 1).astype(np.uint8)
    return np.packbits(stream.reshape(-1), bitorder="little").data.cast("B")
