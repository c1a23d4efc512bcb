"""Whole-model ONNX -> Core ML ML Program: gatepack against OpenVINO's ``ov.convert_model`` + ``ov.save_model`` on
the same ONNX file (the peer: another whole-model converter reading the same file, measured in the same run), in
fresh child processes (medians of ``--repeat``). Also gatepack's verification (the whole package on its MIL
interpreter against onnxruntime on the source) against the conversion itself.

    python bench/coreml_whole.py            # the real models and the 277 MB stacked GRU model
    python bench/coreml_whole.py --quick    # the real models only, one repetition
    python bench/coreml_whole.py --stack    # the 277 MB stacked GRU model only

Goals (issue 30; read from the table, never asserted): conversion <= 1.5x OpenVINO's time, peak RSS <= 2x the
weights, verification <= 1.0x the conversion.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
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
# both sides' frameworks imported before timing (coremltools through gatepack's quiet import)
SETUP = (
    "import onnx, openvino as ov, gatepack as gp, gatepack.converters.formats.coreml.whole\n"
    "from gatepack.converters.formats.coreml.registration import coremltools\ncoremltools()"
)
# the shapes a model needs (silero v4: symbolic batch and sequence decide nested Ifs whose branches differ in rank)
SHAPES = {"silero_vad_v4_lstm_in_if.onnx": {"input": [1, 512], "h": [2, 1, 64], "c": [2, 1, 64]}}


def _row(name: str, src: Path, tmp: str, repeat: int, weights_mb: float) -> str:
    shapes = SHAPES.get(name)
    ov_input = f", input={shapes!r}" if shapes else ""
    peer = measure(SETUP, f"ov.save_model(ov.convert_model({str(src)!r}{ov_input}), {tmp + '/ov.xml'!r})", repeat)
    given = f", input_shapes={shapes!r}" if shapes else ""
    ours = measure(SETUP, f"gp.convert({str(src)!r}, {tmp + '/gp.mlpackage'!r}, verify=False{given})", repeat)
    verified = measure(SETUP, f"gp.convert({str(src)!r}, {tmp + '/gv.mlpackage'!r}{given})", repeat)
    check = verified.seconds - ours.seconds
    return (
        f"| {name} | {weights_mb:.1f} MB | {peer.seconds * 1000:.0f} ms | {ours.seconds * 1000:.0f} ms | "
        f"{ours.seconds / peer.seconds:.2f}x | {check * 1000:.0f} ms ({check / ours.seconds:.2f}x) | "
        f"{ours.peak_mb - ours.before_mb:.0f} MB ({(ours.peak_mb - ours.before_mb) / max(weights_mb, 1):.2f}x) |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--stack", action="store_true", help="the stacked GRU model only")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    print(
        "| model | file | OpenVINO convert_model + save | gatepack --to coreml | ratio | verification (x conversion) "
        "| gatepack peak RSS above imports (x file) |"
    )
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in [] if args.stack else MODELS:
            src = ROOT / "fixtures" / "realmodels" / name
            print(_row(name, src, tmp, repeat, src.stat().st_size / 1e6), flush=True)
        if not args.quick:
            src = Path(tmp) / "stack" / "stack.onnx"
            src.parent.mkdir()
            weights = stacked_model(src, 4, 1024)
            print(_row("4 bidirectional GRUs, H=1024 (external data)", src, tmp, repeat, weights / 1e6), flush=True)


if __name__ == "__main__":
    main()
