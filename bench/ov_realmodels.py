"""Whole-model ONNX -> OpenVINO IR of the real models: gatepack vs OpenVINO's own
``ov.convert_model`` + ``ov.save_model`` (fp32 weights for both), and the frontend alone
(``Core.read_model`` + ``save_model``: what gatepack builds on, without ``convert_model``'s
transformation pipeline), measured in the same run, each
in fresh child processes (medians of 3). Both children import onnx and openvino before timing.

    python bench/ov_realmodels.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import ROOT, measure  # noqa: E402

MODELS = [
    "dfn3_df_dec.onnx",
    "dfn3_erb_dec.onnx",
    "dfn3_enc.onnx",
    "ulunas_stream_simple.onnx",
    "gtcrn_stream_simple.onnx",
]
SETUP = (
    "import onnx, openvino as ov, gatepack as gp, gatepack.converters.formats.onnx, "
    "gatepack.converters.formats.openvino"
)


def main() -> None:
    print(
        "| model | size | `ov.convert_model` + save | `Core.read_model` + save | gatepack convert | ratio to "
        "convert_model / read_model | gatepack verification | peak RSS convert_model / gatepack (MB; after imports) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            src = ROOT / "fixtures" / "realmodels" / name
            peer = measure(
                SETUP, f"ov.save_model(ov.convert_model({str(src)!r}), {tmp + '/ov.xml'!r}, compress_to_fp16=False)"
            )
            plain = measure(
                SETUP, f"ov.save_model(ov.Core().read_model({str(src)!r}), {tmp + '/rm.xml'!r}, compress_to_fp16=False)"
            )
            ours = measure(SETUP, f"gp.convert({str(src)!r}, {tmp + '/gp.xml'!r}, to='openvino', verify=False)")
            verified = measure(SETUP, f"gp.convert({str(src)!r}, {tmp + '/gv.xml'!r}, to='openvino')")
            size = src.stat().st_size / 1e6
            print(
                f"| {name} | {size:.1f} MB | {peer.seconds * 1000:.0f} ms | {plain.seconds * 1000:.0f} ms | "
                f"{ours.seconds * 1000:.0f} ms "
                f"| {ours.seconds / peer.seconds:.2f}x / {ours.seconds / plain.seconds:.2f}x "
                f"| +{(verified.seconds - ours.seconds) * 1000:.0f} ms | {peer.peak_mb:.0f} / {ours.peak_mb:.0f} "
                f"({peer.before_mb:.0f} / {ours.before_mb:.0f}) |"
            )


if __name__ == "__main__":
    main()
