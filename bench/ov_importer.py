"""OpenVINO's own ONNX importer vs gatepack on the generated GRU/RNN matrix (issue 3) or LSTM matrix.

For every configuration of the test matrix (``tests/helpers.py``: every activation with alpha/beta,
per-direction activations, clip, linear_before_reset, sequence_lens, initial_h, no bias, layout 0/1,
edge sizes), the ONNX model goes through

* OpenVINO's importer: ``ov.convert_model(model.onnx)``, compiled for CPU;
* gatepack: ``convert --to openvino`` (strategy auto), the saved IR compiled for CPU;

and both run on the same inputs, compared with onnxruntime (layout-0, float32 twin of the model,
as in the tests) within 1e-5 absolute + 1e-4 relative
(float16 models: 2e-3 + 2e-3). Both compile with
``INFERENCE_PRECISION_HINT=f32`` (the CPU plugin's bf16 default would fail everything).
Outcomes: ``pass``, ``refused`` (convert, compile or inference raised), ``wrong`` (ran, but outside
tolerance: a silent error). As in the tests, half of the sequence_lens cases have static shapes.

With ``--cell lstm`` the LSTM matrix (``tests/helpers.py`` ``lstm_matrix``: peepholes,
input_forget, clip, per-direction activations with alpha/beta, sequence_lens, initial_h/initial_c,
layout, fp16/32/64) is measured the same way, Y_c included; float64 cases against the float64
transcription of ``tests/oracle.py`` (onnxruntime has no float64 LSTM), at float32 tolerance.

    python bench/ov_importer.py [--cell gru-rnn|lstm] [--limit N]
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import openvino as ov

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers import (
    OPENVINO_TOLERANCE,
    Config,
    build_model,
    inputs,
    lstm_matrix,
    matrix,
    ort_reference,
    outputs_to_layout0,
    static_case,
    static_model,
    to_layout,
)  # noqa: E402
from oracle import reference as float64_reference  # noqa: E402

import gatepack as gp  # noqa: E402

CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}


def outcome(run, cfg: Config, feed0: dict, reference: tuple) -> tuple[str, str]:
    try:
        outputs = run()
    except Exception as err:  # noqa: BLE001 - any failure is a refusal
        return "refused", " ".join(str(err).split())[:160]
    for got, ref in zip(outputs_to_layout0(cfg, *outputs), reference):
        finite = np.isfinite(ref)
        if got.shape != ref.shape:
            return "wrong", f"shape {list(got.shape)} instead of {list(ref.shape)}"
        atol, rtol = OPENVINO_TOLERANCE[cfg.dtype]
        if not np.allclose(got[finite], ref[finite], atol=atol, rtol=rtol):
            return "wrong", f"max abs error {float(np.abs(got[finite] - ref[finite]).max()):.3g}"
    return "pass", ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N configurations")
    parser.add_argument("--cell", choices=["gru-rnn", "lstm"], default="gru-rnn", help="which matrix")
    args = parser.parse_args()
    cases = (lstm_matrix() if args.cell == "lstm" else matrix())[: args.limit]
    core = ov.Core()
    counts = {"OpenVINO importer": collections.Counter(), "gatepack": collections.Counter()}
    reasons: dict[str, collections.Counter] = {"refused": collections.Counter(), "wrong": collections.Counter()}
    with tempfile.TemporaryDirectory() as tmp:
        for cfg in cases:
            src = Path(tmp) / "m.onnx"
            onnx.save(static_model(cfg) if static_case(cfg) else build_model(cfg), src)
            feed0 = inputs(cfg)
            feed = to_layout(cfg, feed0)
            lstm_float64 = cfg.cell == "LSTM" and cfg.dtype == "float64"
            reference = float64_reference(cfg, feed0) if lstm_float64 else ort_reference(cfg, feed0)

            def importer():
                compiled = core.compile_model(ov.convert_model(str(src)), "CPU", CONFIG)
                out = compiled({i.get_any_name(): feed[i.get_any_name()] for i in compiled.inputs})
                return [np.asarray(out[name]) for name in cfg.outputs]

            def gatepack():
                xml = Path(tmp) / "m.xml"
                gp.convert(src, xml, to="openvino", allow_lossy=True, verify=False)
                out = gp.run(xml, feed)
                return [out[name] for name in cfg.outputs]

            for tool, run in (("OpenVINO importer", importer), ("gatepack", gatepack)):
                result, why = outcome(run, cfg, feed0, reference)
                counts[tool][result] += 1
                if tool == "OpenVINO importer" and result != "pass":
                    reasons[result][classify(cfg, result, why)] += 1
    total = len(cases)
    print(f"{total} configurations (OpenVINO {ov.__version__}, CPU, f32 inference precision)\n")
    print("| tool | pass | refused | silently wrong |")
    print("|---|---|---|---|")
    for tool, c in counts.items():
        print(f"| {tool} | {c['pass']} ({100 * c['pass'] / total:.0f}%) | {c['refused']} | {c['wrong']} |")
    for kind, counter in reasons.items():
        print(f"\nOpenVINO importer, {kind}, by cause (first matching cause):")
        for cause, n in counter.most_common():
            print(f"  {n:4d}  {cause}")


def classify(cfg: Config, result: str, why: str) -> str:
    """The first documented cause that applies to a configuration (docs/conventions.md §3)."""
    acts = cfg.activations or []
    native = {"GRU": {"Sigmoid", "Tanh"}, "RNN": {"Sigmoid", "Tanh", "Relu"}, "LSTM": {"Sigmoid", "Tanh", "Relu"}}[
        cfg.cell
    ]
    if cfg.peepholes and result == "wrong":
        return "peepholes dropped (LSTMSequence has no input for them)"
    if cfg.input_forget and result == "wrong":
        return "input_forget dropped (LSTMSequence has no coupling)"
    half = len(acts) // 2
    per_direction = cfg.direction == "bidirectional" and acts and acts[:half] != acts[half:]
    used = acts[:half] if per_direction else acts  # the importer uses the forward pair for both directions
    if (
        per_direction and result == "wrong"
    ):  # compiled (OpenVINO decomposes a GRU with Relu itself), reverse pair ignored
        return "reverse direction's own activations ignored"
    if "nknown activation" in why or "nsupported activation" in why or not set(used) <= native:
        return "activation the CPU plugin lacks"
    if cfg.layout == 1:
        return "layout = 1 ignored"
    if per_direction:
        return "reverse direction's own activations ignored"
    if cfg.seq_lens in ("mixed", "zero"):
        return "sequence_lens with a dynamic X ignored"
    if cfg.clip == 0:
        return "clip = 0 read as no clip"
    if cfg.clip is not None and cfg.clip < 0:
        return "negative clip applied (onnxruntime: no clip)"
    return f"other ({cfg.label()}): {why[:80]}"


if __name__ == "__main__":
    main()
