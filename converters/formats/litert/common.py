"""LiteRT: what the writer, reader and runner share (the official schema, a flatbuffer graph builder, the fused
activations, the tensor roles of the sequence ops).

The schema is the official one ai-edge-litert ships (``schema_py_generated``, flatc's Python object API:
``ModelT``, ``SubGraphT``, ``TensorT`` ... ``Pack``/``InitFromPackedBuf``), imported through
``litert.registration`` only when a command needs it.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from gatepack.converters.formats.litert.quantized import parameters

FORMAT = "litert"
METADATA_KEY = "gatepack"  # the model's metadata entry holding gatepack's description of its layers
HELD_KEY = "states"  # its entry naming a stateful whole model's held state pairs, input -> output (stateful_whole)
FILE_IDENTIFIER = b"TFL3"
# FlatBuffers' offsets are 32-bit signed: a FlatBuffer holds at most 2 GiB - 1 bytes
FLATBUFFER_LIMIT = 2**31 - 1
# Offset buffers (docs/conventions.md §11): a model whose weights pass OFFSET_FROM bytes (or the FlatBuffer limit) has
# every buffer of OUTSIDE_FROM bytes or more stored after the FlatBuffer, at an absolute offset aligned to
# OFFSET_ALIGNMENT, named by the buffer's ``offset`` and ``size``; smaller models stay one FlatBuffer (any LiteRT reads)
OFFSET_FROM = 64 * 2**20
OUTSIDE_FROM = 1024
OFFSET_ALIGNMENT = 64
_PLACEHOLDER_OFFSET = 2**62  # an offset of the final width, packed first to learn the FlatBuffer's length
_TABLE_BYTES = 256  # room per tensor and operator for its table, name and shape, besides the weights
SCHEMA_VERSION = 3


def schema() -> ModuleType:
    from gatepack.converters.formats.litert.registration import litert

    return litert()[0]


# ONNX activation -> the fused activation (ActivationFunctionType) that computes it exactly. The sequence ops
# apply it to the RNN's hidden state, and to the LSTM's cell candidate and cell output (its gates are always
# the logistic sigmoid); docs/conventions.md §11.
FUSED = {
    "Tanh": "TANH",
    "Relu": "RELU",
}  # ActivationFunctionType has no sigmoid (RELU_N1_TO_1, RELU6, SIGN_BIT: none in ONNX)
FUSED_NAMES = {value: key for key, value in FUSED.items()}

# UNIDIRECTIONAL_SEQUENCE_LSTM's 24 inputs (lstm_shared.h): per gate i, f, c, o its input and recurrent
# weights, the peepholes cell_to_{i,f,o}, the biases, projection, the two variable states, layer norm.
LSTM_INPUT = 0
LSTM_INPUT_WEIGHTS = {"i": 1, "f": 2, "c": 3, "o": 4}
LSTM_RECURRENT_WEIGHTS = {"i": 5, "f": 6, "c": 7, "o": 8}
LSTM_PEEPHOLES = {"i": 9, "f": 10, "o": 11}
LSTM_BIASES = {"i": 12, "f": 13, "c": 14, "o": 15}
LSTM_PROJECTION = (16, 17)
LSTM_OUTPUT_STATE, LSTM_CELL_STATE = 18, 19
LSTM_LAYER_NORM = (20, 21, 22, 23)
LSTM_INPUTS = 24
# UNIDIRECTIONAL_SEQUENCE_RNN's inputs: input, input_weights, recurrent_weights, bias, hidden_state (variable)
RNN_INPUTS = 5


# the first version of a builtin LiteRT's op resolver registers, where it is not 1 (BROADCAST_TO starts at 2)
FIRST_VERSION = {"BROADCAST_TO": 2}


@dataclass
class Graph:
    """One subgraph being built with the schema's object API: tensors (each with its own buffer), operators
    (operator codes interned), inputs and outputs; ``finish`` packs the model with the ``TFL3`` identifier."""

    s: ModuleType
    model: Any = None
    graph: Any = None
    codes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        s = self.s
        self.model = s.ModelT()
        self.model.version = SCHEMA_VERSION
        self.model.buffers = [s.BufferT()]  # buffer 0: the empty buffer of every tensor without data
        self.model.operatorCodes = []
        self.model.description = "gatepack"
        self.graph = s.SubGraphT()
        self.graph.tensors, self.graph.operators, self.graph.inputs, self.graph.outputs = [], [], [], []
        self.graph.name = "main"
        self.model.subgraphs = [self.graph]

    def tensor(
        self,
        name: str,
        shape: list,
        dtype: str = "FLOAT32",
        data: np.ndarray | None = None,
        variable: bool = False,
    ) -> int:
        """A tensor; a None dimension is dynamic (-1 in its shape signature, 1 in its shape)."""
        s = self.s
        t = s.TensorT()
        t.name, t.type, t.isVariable = name, getattr(s.TensorType, dtype), variable
        t.shape = [1 if d is None else int(d) for d in shape]
        if any(d is None for d in shape):
            t.shapeSignature = [-1 if d is None else int(d) for d in shape]
        t.buffer = 0
        if data is not None:
            buffer = s.BufferT()
            buffer.data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)  # a view: packing copies it once
            self.model.buffers.append(buffer)
            t.buffer = len(self.model.buffers) - 1
        self.graph.tensors.append(t)
        return len(self.graph.tensors) - 1

    def const(self, name: str, value: np.ndarray) -> int:
        value = np.ascontiguousarray(value)
        dtype = {"float32": "FLOAT32", "int32": "INT32"}[value.dtype.name]
        return self.tensor(name, list(value.shape), dtype, value)

    def int8(self, name: str, values: np.ndarray, scale: np.ndarray) -> int:
        """An INT8 weight tensor [rows, cols] with one scale per row, stored as one per tensor when they agree
        (zero points 0): what the hybrid kernels take (``quantized``)."""
        index = self.tensor(name, list(values.shape), "INT8", np.ascontiguousarray(values, np.int8))
        self.graph.tensors[index].quantization = parameters(self.s, scale)
        return index

    def shape_of(self, index: int) -> list:
        t = self.graph.tensors[index]
        signature = t.shapeSignature if t.shapeSignature is not None else t.shape
        return [None if d < 0 else int(d) for d in signature]

    def op(self, name: str, inputs: list[int], outputs: list[int], options: Any = None) -> None:
        """Operator ``name`` (a BuiltinOperator) with its options object (its type from the class name)."""
        s = self.s
        code = getattr(s.BuiltinOperator, name)
        if code not in self.codes:
            entry = s.OperatorCodeT()
            entry.builtinCode, entry.deprecatedBuiltinCode = code, min(code, 127)
            entry.version = FIRST_VERSION.get(name, 1)
            self.model.operatorCodes.append(entry)
            self.codes[code] = len(self.model.operatorCodes) - 1
        op = s.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = self.codes[code], list(inputs), list(outputs)
        if options is not None:
            op.builtinOptionsType = getattr(s.BuiltinOptions, type(options).__name__[:-1])
            op.builtinOptions = options
        self.graph.operators.append(op)

    def options(self, kind: str, **values: Any) -> Any:
        """An options object (``kind`` without the T suffix) with ``values`` set."""
        found = getattr(self.s, f"{kind}T")()
        for key, value in values.items():
            setattr(found, key, value)
        return found

    def finish(self, metadata: dict | None, source: object = "the model") -> bytes:
        """The packed model, with ``metadata`` as its ``gatepack`` entry (None: no entry), as bytes (``packed``)."""
        return self.packed(metadata, source).tobytes()

    def packed(self, metadata: dict | None, source: object = "the model") -> Packed:
        """The packed model: the FlatBuffer as a view of the builder's own bytes and, in the offset form
        (``outside``), the buffers stored after it, for writing to a file without a copy. The builder is sized for
        what it holds at once (its default doubles its bytearray, copying it, some 30 times for 277 MB). RefusedError
        naming ``source`` when the FlatBuffer would pass FlatBuffers' limit (``check_size``)."""
        if metadata is not None:
            buffer = self.s.BufferT()
            buffer.data = np.frombuffer(json.dumps(metadata).encode(), np.uint8)
            self.model.buffers.append(buffer)
            entry = self.s.MetadataT()
            entry.name, entry.buffer = METADATA_KEY, len(self.model.buffers) - 1
            self.model.metadata = [entry]
        size = self.check_size(source)
        outside = self.outside()
        if not outside:
            return Packed(self._pack(size), [])
        tail = [buffer.data for buffer in outside]
        for buffer, data in zip(outside, tail):
            buffer.data, buffer.offset, buffer.size = None, _PLACEHOLDER_OFFSET, int(data.nbytes)
        head = self._pack(size)  # the offsets' width is fixed: the FlatBuffer keeps this length
        offsets = _aligned_offsets(len(head), [int(data.nbytes) for data in tail])
        for buffer, offset in zip(outside, offsets):
            buffer.offset = offset
        self._patch_offsets(head, outside)
        return Packed(head, list(zip(offsets, tail)))

    def _patch_offsets(self, head: memoryview, outside: list) -> None:
        """Each buffer of ``outside`` given its ``offset`` in the packed ``head`` in place: the placeholder of the
        same width packed there is overwritten (a second pack of the tables would write the same bytes with these
        values; it took a third of the GRU stack's int8 conversion)."""
        index = {id(b): k for k, b in enumerate(self.model.buffers)}
        root = self.s.Model.GetRootAs(head, 0)
        for buffer in outside:
            table = root.Buffers(index[id(buffer)])._tab
            field_at = table.Pos + table.Offset(6)  # Buffer.offset: the table's second field (vtable slot 6)
            assert struct.unpack_from("<Q", head, field_at)[0] == _PLACEHOLDER_OFFSET
            struct.pack_into("<Q", head, field_at, buffer.offset)

    def _pack(self, size: int) -> memoryview:
        import flatbuffers

        builder = flatbuffers.Builder(size + _TABLE_BYTES * (len(self.graph.tensors) + len(self.graph.operators)))
        builder.Finish(self.model.Pack(builder), file_identifier=FILE_IDENTIFIER)
        return memoryview(builder.Bytes)[builder.Head() :]

    def outside(self) -> list:
        """The buffers the offset form stores after the FlatBuffer: none while the weights (every buffer's bytes)
        stay within ``OFFSET_FROM`` and the FlatBuffer limit, else each of ``OUTSIDE_FROM`` bytes or more but the
        metadata's (read from the FlatBuffer alone by ``stateful_whole.held_states``)."""
        weights = sum(int(b.data.nbytes) for b in self.model.buffers if b.data is not None)
        if weights <= min(OFFSET_FROM, FLATBUFFER_LIMIT):
            return []
        described = {int(entry.buffer) for entry in self.model.metadata or []}
        return [
            b
            for k, b in enumerate(self.model.buffers)
            if b.data is not None and int(b.data.nbytes) >= OUTSIDE_FROM and k not in described
        ]

    def check_size(self, source: object) -> int:
        """The bytes of the buffers the FlatBuffer holds itself (all of them, or those the offset form keeps
        inside, ``outside``); RefusedError naming ``source`` when they and the tables pass ``FLATBUFFER_LIMIT``,
        before anything is packed or written."""
        from gatepack.converters.errors import RefusedError

        stored = {id(b) for b in self.outside()}
        size = sum(int(b.data.nbytes) for b in self.model.buffers if b.data is not None and id(b) not in stored)
        tables = _TABLE_BYTES * (len(self.graph.tensors) + len(self.graph.operators))
        if size + tables > FLATBUFFER_LIMIT:
            raise RefusedError(
                f"{source}: the LiteRT FlatBuffer would hold {size + tables:,} bytes ({(size + tables) / 2**30:.2f} "
                f"GiB: its {len(self.graph.tensors):,} tensors, {len(self.graph.operators):,} operators and the "
                f"constants under {OUTSIDE_FROM:,} bytes each), more than the {FLATBUFFER_LIMIT:,} bytes a "
                "FlatBuffer holds: its offsets are 32-bit (2 GiB); larger constants are stored after it",
                hint="convert to onnx (weights as external data) or openvino (weights in a .bin beside the IR), "
                "which hold larger graphs",
            )
        return size


def _aligned_offsets(start: int, sizes: list[int]) -> list[int]:
    """Absolute file offsets for buffers of ``sizes`` bytes stored one after the other from ``start`` (the
    FlatBuffer's length), each aligned to ``OFFSET_ALIGNMENT``."""
    offsets, at = [], start
    for size in sizes:
        at += -at % OFFSET_ALIGNMENT
        offsets.append(at)
        at += size
    return offsets


@dataclass
class Packed:
    """A packed model: the FlatBuffer ``head``, then each (offset, bytes) of ``tail`` at its absolute offset (the
    offset form; zeros between for alignment)."""

    head: memoryview
    tail: list[tuple[int, np.ndarray]]

    def write(self, path: str | Path) -> None:
        """The file at ``path``, written atomically, each buffer straight from its array (no copy of the model)."""
        from gatepack.converters.fileio import atomic_path

        with atomic_path(Path(path)) as staged, open(staged, "wb") as handle:
            handle.write(self.head)
            for offset, data in self.tail:
                handle.write(bytes(offset - handle.tell()))
                handle.write(np.ascontiguousarray(data).data.cast("B"))

    def tobytes(self) -> bytes:
        """The file's bytes (for an interpreter in memory)."""
        if not self.tail:
            return bytes(self.head)
        parts, at = [bytes(self.head)], len(self.head)
        for offset, data in self.tail:
            parts += [bytes(offset - at), np.ascontiguousarray(data).tobytes()]
            at = offset + int(data.nbytes)
        return b"".join(parts)
