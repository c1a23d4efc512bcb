"""Whole-model ONNX -> Core ML ML Program (or, ``--to litert``, one LiteRT file): gatepack against OpenVINO's
``ov.convert_model`` + ``ov.save_model`` on the same ONNX file (the peer: another whole-model converter reading the
same file, measured in the same run), in fresh child processes (medians of ``--repeat``). Also gatepack's
verification (Core ML: the whole package on its MIL interpreter; LiteRT: the file on ai-edge-litert's interpreter;
against onnxruntime on the source) against the conversion itself.

    python bench/coreml_whole.py            # the real models and the 277 MB stacked GRU model
    python bench/coreml_whole.py --quick    # the real models only, one repetition
    python bench/coreml_whole.py --stack    # the 277 MB stacked GRU model only
    python bench/coreml_whole.py --to litert  # the same to LiteRT (the models its operator column translates)

Goals (issues 30 and 45; read from the table, never asserted): conversion <= 1.5x OpenVINO's time, peak RSS <= 2x
the weights, verification <= 1.0x the conversion. A model the target refuses gets a row saying why.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import ROOT, measure  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from helpers import stacked_model  # noqa: E402

MODELS = [
    "gtcrn_stream.onnx",
    "gtcrn_stream_simple.onnx",
    "ulunas_stream_simple.onnx",
    "dfn3_enc.onnx",
    "dfn3_erb_dec.onnx",
    "dfn3_df_dec.onnx",
    "dpcrn_online_simple_lstm.onnx",
    "dtln_model_1_lstm.onnx",
    "silero_vad_openvino_16k_lstm.onnx",
    "silero_vad_v4_lstm_in_if.onnx",
]
# the models gatepack's LiteRT column translates whole (gtcrn: a refusal row while its grouped Conv is refused)
LITERT_MODELS = ["gtcrn_stream_simple.onnx", "dtln_model_1_lstm.onnx", "dpcrn_online_simple_lstm.onnx"]
STACK = "4 bidirectional GRUs, H=1024 (external data)"


@dataclass(frozen=True)
class Target:
    setup: str  # both sides' frameworks, imported before timing
    suffix: str
    peer_options: str  # ov.save_model's: the peer writes the precision gatepack writes
    stack_shapes: dict | None  # the stack's input shapes gatepack is given (LiteRT writes static shapes)


TARGETS = {
    # coremltools through gatepack's quiet import; OpenVINO's default fp16 weights (the first runs' peer)
    "coreml": Target(
        "import onnx, openvino as ov, gatepack as gp, gatepack.converters.formats.coreml.whole\n"
        "from gatepack.converters.formats.coreml.registration import coremltools\ncoremltools()",
        ".mlpackage",
        "",
        None,
    ),
    "litert": Target(
        "import onnx, onnxruntime, openvino as ov, gatepack as gp, gatepack.converters.formats.litert.whole\n"
        "import ai_edge_litert.interpreter",
        ".tflite",
        ", compress_to_fp16=False",
        {"X": [7, 3, 1024]},
    ),
}
# the shapes a model needs (silero v4: symbolic batch and sequence decide nested Ifs whose branches differ in rank)
SHAPES = {"silero_vad_v4_lstm_in_if.onnx": {"input": [1, 512], "h": [2, 1, 64], "c": [2, 1, 64]}}


def _row(name: str, src: Path, tmp: str, repeat: int, weights_mb: float, target: str) -> str:
    """One model's row: OpenVINO, gatepack, its verification, gatepack's peak RSS (above its imports and in all)."""
    chosen = TARGETS[target]
    shapes = SHAPES.get(name)
    ov_input = f", input={shapes!r}" if shapes else ""
    given = shapes or (chosen.stack_shapes if name == STACK else None)
    given_text = f", input_shapes={given!r}" if given else ""
    convert = f"gp.convert({str(src)!r}, {tmp + '/gp' + chosen.suffix!r}, to={target!r}, verify=False{given_text})"
    try:
        ours = measure(chosen.setup, convert, repeat)
    except RuntimeError as err:  # the target refuses the model: the row says why
        reason = str(err).strip().splitlines()[-1].split(": ", 2)[-1]  # (the exception's type and the path apart)
        return f"| {name} | {weights_mb:.1f} MB | refused: {reason[:200]} |"
    peer = measure(
        chosen.setup,
        f"ov.save_model(ov.convert_model({str(src)!r}{ov_input}), {tmp + '/ov.xml'!r}{chosen.peer_options})",
        repeat,
    )
    verified = measure(chosen.setup, convert.replace("/gp", "/gv").replace(", verify=False", ""), repeat)
    check = verified.seconds - ours.seconds
    above = ours.peak_mb - ours.before_mb
    return (
        f"| {name} | {weights_mb:.1f} MB | {peer.seconds * 1000:.0f} ms | {ours.seconds * 1000:.0f} ms | "
        f"{ours.seconds / peer.seconds:.2f}x | {check * 1000:.0f} ms ({check / ours.seconds:.2f}x) | "
        f"{above:.0f} MB ({above / max(weights_mb, 1):.2f}x); {ours.peak_mb:.0f} MB in all "
        f"({ours.peak_mb / max(weights_mb, 1):.2f}x) / OpenVINO {peer.peak_mb:.0f} MB |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--stack", action="store_true", help="the stacked GRU model only")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--to", choices=sorted(TARGETS), default="coreml")
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    print(
        f"| model | file | OpenVINO convert_model + save | gatepack --to {args.to} | ratio "
        "| verification (x conversion) | gatepack peak RSS above imports (x file); in all (x file) / OpenVINO's |"
    )
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in [] if args.stack else (LITERT_MODELS if args.to == "litert" else MODELS):
            src = ROOT / "fixtures" / "realmodels" / name
            print(_row(name, src, tmp, repeat, src.stat().st_size / 1e6, args.to), flush=True)
        if not args.quick:
            src = Path(tmp) / "stack" / "stack.onnx"
            src.parent.mkdir()
            weights = stacked_model(src, 4, 1024)
            print(_row(STACK, src, tmp, repeat, weights / 1e6, args.to), flush=True)


if __name__ == "__main__":
    main()
