"""The coverage table of the MIL interpreter's proof: every MIL op, and every attribute value that selects what it
computes, that gatepack writes, each with the case that proves the interpreter on it against a source other than the
interpreter.

What gatepack writes is read from its writers' source (``emitted``): the ``mb.<op>(...)`` calls of the layer writer,
the native-op and lifting helpers, the whole-model writer and the ONNX operator table, the op names its tables hand
to ``getattr(mb, ...)``, and the literal values of behaviour attributes; attribute values computed at run time are
enumerated in ``DOMAINS`` from what the writers can pass (their source named). A proof is ``apple`` (a passed Apple
case compared on the interpreter whose program holds the op; ``apple:fp16`` one run on an fp16 backend) or
``test:<function>`` (a ``coreml_proof`` test of ``tests/test_mil_proof.py``, builder against onnxruntime or a NumPy
reference from Apple's documentation). ``tests/test_mil_apple.py`` fails when an emitted op or value has no row,
or a row's proof does not hold; ``docs/mil_coverage.md`` is this table, generated (``GATEPACK_MIL_COVERAGE=write``).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WRITERS = (
    "writer.py",
    "native_ops.py",
    "lifting.py",
    "whole.py",
    "onnx_ops/elementwise.py",
    "onnx_ops/nn.py",
    "onnx_ops/tensor.py",
    "onnx_ops/quantized.py",
    "compressed.py",
)
# builder calls that make inputs, states and constants rather than ops the interpreter computes
NOT_OPS = {"const", "placeholder", "state_tensor_placeholder"}
# attributes whose literal value selects what the op computes (a row per value written)
BEHAVIOUR = {"mode", "dtype", "interleave", "transpose_x", "transpose_y", "keep_dims", "pad_type", "direction"}

RECURRENT_ACTIVATIONS = ("sigmoid", "tanh", "relu")  # converters.apple.NATIVE_ACTIVATIONS' values
# (op, attribute): the values gatepack's writers can pass where the source computes them, and where that is decided
DOMAINS: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    ("gru", "direction"): (("forward", "reverse"), "writer._emit_native: one op per direction"),
    ("gru", "recurrent_activation"): (RECURRENT_ACTIVATIONS, "NATIVE_ACTIVATIONS"),
    ("gru", "activation"): (RECURRENT_ACTIVATIONS, "NATIVE_ACTIVATIONS"),
    ("gru", "reset_after"): (("false", "true"), "iOS18 targets: the layer's linear_before_reset"),
    ("gru", "input_bias"): (("given",), "apple_tensor: the input biases with linear_before_reset"),
    ("gru", "batch"): (("> 1",), "any batch"),
    ("rnn", "direction"): (("forward", "reverse"), "writer._emit_native"),
    ("rnn", "activation"): (RECURRENT_ACTIVATIONS, "NATIVE_ACTIVATIONS"),
    ("rnn", "batch"): (("> 1",), "any batch"),
    ("lstm", "direction"): (("forward", "reverse"), "writer._emit_native"),
    ("lstm", "recurrent_activation"): (RECURRENT_ACTIVATIONS, "NATIVE_ACTIVATIONS"),
    ("lstm", "cell_activation"): (RECURRENT_ACTIVATIONS, "NATIVE_ACTIVATIONS"),
    ("lstm", "activation"): (RECURRENT_ACTIVATIONS, "NATIVE_ACTIVATIONS"),
    ("lstm", "peephole"): (("given",), "the layer's P"),
    ("lstm", "batch"): (("> 1",), "any batch"),
    ("conv", "dilations"): (("1", "> 1"), "ONNX Conv dilations"),
    ("conv", "groups"): (("1", "> 1"), "ONNX Conv group"),
    ("conv", "strides"): (("1", "> 1"), "ONNX Conv strides"),
    ("conv", "pad_type"): (("custom", "valid", "same", "same_lower"), "onnx_ops.nn._window_options"),
    ("conv_transpose", "strides"): (("> 1",), "ONNX ConvTranspose strides"),
    ("conv_transpose", "dilations"): (("> 1",), "ONNX ConvTranspose dilations"),
    ("conv_transpose", "groups"): (("> 1",), "ONNX ConvTranspose group"),
    ("conv_transpose", "pad_type"): (("custom",), "onnx_ops.nn._conv_transpose"),
    ("slice_by_index", "stride"): (("1", "> 1", "< 0"), "ONNX Slice steps"),
    ("slice_by_index", "begin_mask"): (("set",), "ONNX Slice: a start clamped to the axis' beginning"),
    ("slice_by_index", "end_mask"): (("set",), "ONNX Slice: an end past the axis"),
    ("layer_norm", "epsilon"): (("any",), "ONNX LayerNormalization epsilon"),
    ("real_div", "dtype"): (("fp32", "int32"), "ONNX Div on floats and on shape integers"),
    ("reshape", "shape with 0"): (("rank of x", "another rank"), "onnx_ops.tensor: resolved 0s; iOS17 programs"),
    ("fill", "value"): (("0", "other"), "zero states; ConstantOfShape"),
    ("gather", "indices"): (("negative",), "iOS15/16 programs keep ONNX's negative indices"),
    ("constexpr_affine_dequantize", "scale"): (("scalar", "per row"), "compressed.emit: per tensor, per channel"),
    ("constexpr_affine_dequantize", "zero_point"): (("0", "other"), "compressed.emit: symmetric or a source's"),
    ("constexpr_blockwise_shift_scale", "scale"): (
        ("[1, 1]", "[rows, 1]", "[rows, blocks]"),
        "compressed.emit: per tensor, channel, block",
    ),
    ("constexpr_blockwise_shift_scale", "offset"): (("absent", "given"), "compressed.emit: a non-zero zero point"),
}

# elementwise and reduction ops on floats: in fp32 programs, and in fp16 ones (compress_to_fp16)
FLOAT_DTYPES = ("fp32", "fp16")
CORE_ELEMENTWISE = {"add", "sub", "mul", "real_div", "maximum", "minimum", "sigmoid", "tanh", "relu", "clip"}
NOT_FLOAT = {"logical_and", "logical_or", "logical_xor", "logical_not", "less_equal", "not_equal"}


def _elementwise_or_reduction(op: str) -> bool:
    from gatepack.converters.formats.coreml.mil_elementwise import OPS

    return (op in OPS or op in CORE_ELEMENTWISE or op.startswith("reduce_")) and op not in NOT_FLOAT


def _mb_call(node: ast.AST) -> str | None:
    """The op of a ``mb.<op>(...)`` / ``<x>.mb.<op>(...)`` call, else None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    owner = node.func.value
    named = (isinstance(owner, ast.Name) and owner.id == "mb") or (
        isinstance(owner, ast.Attribute) and owner.attr == "mb"
    )
    return node.func.attr if named else None


def _calls_getattr_on_mb(tree: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == "getattr"
        and n.args
        and "mb" in ast.unparse(n.args[0])
        for n in ast.walk(tree)
    )


def emitted(op_types: set[str]) -> set[tuple[str, str, str]]:
    """(op, attribute, value) for every op the writers emit (attribute and value ''), every literal value of a
    ``BEHAVIOUR`` attribute they pass, and every value of ``DOMAINS``; ``op_types`` are the MIL op names a module
    that looks ops up by name (``getattr(mb, name)``) may mean with a string it holds."""
    found: set[tuple[str, str, str]] = set()
    for name in WRITERS:
        tree = ast.parse((ROOT / "converters" / "formats" / "coreml" / name).read_text())
        for node in ast.walk(tree):
            op = _mb_call(node)
            if op is None or op in NOT_OPS:
                continue
            found.add((op, "", ""))
            for keyword in node.keywords:  # type: ignore[attr-defined]
                if keyword.arg in BEHAVIOUR and isinstance(keyword.value, ast.Constant):
                    found.add((op, keyword.arg, str(keyword.value.value).lower()))
        if _calls_getattr_on_mb(tree):
            strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            found |= {(op, "", "") for op in strings & op_types}
    found |= {(op, attribute, value) for (op, attribute), (values, _) in DOMAINS.items() for value in values}
    float_ops = {op for op, attribute, _ in found if not attribute and _elementwise_or_reduction(op)}
    found |= {(op, "dtype", dtype) for op in float_ops for dtype in FLOAT_DTYPES}
    return found


APPLE, APPLE_FP16 = "apple", "apple:fp16"


def _test(name: str) -> str:
    return f"test:{name}"


def _every_value(op: str, test: str) -> dict[tuple[str, str, str], str]:
    """The op's row and a row per value of each of its ``DOMAINS`` attributes, all proved by ``test``."""
    rows = {(op, a, v): _test(test) for (o, a), (values, _) in DOMAINS.items() if o == op for v in values}
    return {(op, "", ""): _test(test), **rows}


# (op, attribute, value) -> proof, where Apple's cases alone do not suffice (an Apple row is found from the records)
ROWS: dict[tuple[str, str, str], str] = {
    **_every_value("gru", "test_gru"),
    **_every_value("rnn", "test_rnn"),
    **_every_value("lstm", "test_lstm"),
    **_every_value("conv", "test_conv"),
    **_every_value("conv_transpose", "test_conv_transpose"),
    **_every_value("slice_by_index", "test_slice_by_index"),
    ("layer_norm", "epsilon", "any"): _test("test_layer_norm"),
    ("real_div", "dtype", "int32"): _test("test_integer_real_div_truncates"),
    ("reshape", "shape with 0", "rank of x"): APPLE,
    ("reshape", "shape with 0", "another rank"): _test("test_reshape_with_a_zero_and_a_different_rank"),
    ("fill", "", ""): _test("test_fill_from_a_run_time_shape"),
    ("fill", "value", "0"): _test("test_fill_from_a_run_time_shape"),
    ("fill", "value", "other"): _test("test_fill_from_a_run_time_shape"),
    ("gather", "indices", "negative"): _test("test_gather_with_negative_indices"),
    ("ceil", "", ""): _test("test_rounding_and_logic_against_onnxruntime"),
    ("ceil", "dtype", "fp32"): _test("test_rounding_and_logic_against_onnxruntime"),
    ("ceil", "dtype", "fp16"): _test("test_rounding_in_fp16"),
    ("read_state", "", ""): _test("test_state_read_and_update"),
    ("coreml_update_state", "", ""): _test("test_state_read_and_update"),
    ("while_loop", "", ""): _test("test_control_flow"),
    ("cond", "", ""): _test("test_control_flow"),
    **{
        (op, "", ""): _test("test_rounding_and_logic_against_onnxruntime")
        for op in ("logical_and", "logical_or", "logical_xor", "logical_not")
    },
}


def proof_of(row: tuple[str, str, str]) -> str:
    """The proof a row needs: its entry in ``ROWS``, else a passed Apple case holding the op (on an fp16 backend for
    an fp16 row)."""
    if row in ROWS:
        return ROWS[row]
    return APPLE_FP16 if row[1:] == ("dtype", "fp16") else APPLE


def table(rows: set[tuple[str, str, str]]) -> str:
    """The coverage table as Markdown: one line per row with its proof."""
    lines = [
        "# What proves gatepack's MIL interpreter, op by op",
        "",
        "Generated by `tests/mil_coverage.py` (`GATEPACK_MIL_COVERAGE=write pytest tests/test_mil_apple.py`): every",
        "MIL op and behaviour attribute value gatepack's Core ML writers emit, and the case that proves the",
        "interpreter on it against a source other than itself. `apple`: a passed case of Apple's own op tests",
        "compared on the interpreter (`apple:fp16`: on an fp16 backend); `test:` a test of `tests/test_mil_proof.py`",
        "(the op built with coremltools' builder, against onnxruntime or a NumPy reference from Apple's docs;",
        'docs/conventions.md, "What proves the MIL interpreter").',
        "",
        "| op | attribute | value | proof |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {op} | {attribute} | {value} | {proof_of((op, attribute, value))} |"
        for op, attribute, value in sorted(rows)
    ]
    return "\n".join(lines) + "\n"
