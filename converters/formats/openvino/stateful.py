"""Stateful OpenVINO IRs: a streaming model's states kept on the device as OpenVINO variables.

OpenVINO's own transformation (``openvino.passes.MakeStateful``, as its model optimizer applies to its own
stateful models) replaces each state pair's Parameter (the state input) and Result (the state output) with a
``ReadValue``/``Assign`` pair sharing one variable: the IR then takes the frame inputs only, and an infer
request carries the states from one call to the next. gatepack names each variable ``INPUT->OUTPUT`` (the
state pair it replaces), so an IR read back says which source tensors it holds.

Semantics an app relies on (OpenVINO's documentation of stateful models): a new infer request starts with
every variable at its initial value — zeros here, as the source's zero states (``ReadValue`` without an
initializer) — and ``InferRequest.reset_state()`` returns to it (the start of a new stream); each ``infer``
reads the variables, and the ``Assign``s write the new states when it ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from gatepack.converters.errors import RuntimeFailure, UsageError
from gatepack.converters.formats.openvino.ir import COMPILE_CONFIG, ov_message
from gatepack.converters.formats.openvino.registration import openvino
from gatepack.converters.formats.openvino.running import read_at_fed_shapes

SEPARATOR = "->"  # a variable's id: the state input's name, this separator, the state output's name


def make_stateful(
    ov_model, pairs: Sequence[tuple[str, str]], label: str, shapes: dict[str, list[int]] | None = None
) -> None:
    """Turn each (state input, state output) pair of ``ov_model`` into a variable, in place; ``shapes`` (input
    name -> dims, ``--input-shape``) fix the inputs' dynamic dimensions first (a variable's shape is static)."""
    from openvino.passes import MakeStateful, Manager

    params = {name: p for p in ov_model.get_parameters() for name in p.output(0).get_names()}
    fixed = {params[name].output(0): dims for name, dims in (shapes or {}).items() if name in params}
    if fixed:
        try:
            ov_model.reshape(fixed)
        except Exception as err:
            raise UsageError(f"{label}: the input shapes {shapes} do not fit the model: {err}") from None
    results = {name: r for r in ov_model.get_results() for name in r.input(0).get_tensor().get_names()}
    chosen = []
    for state_input, state_output in pairs:
        if state_input not in params or state_output not in results:
            missing = state_input if state_input not in params else state_output
            raise UsageError(f"{label}: the state pair {state_input}={state_output} names no tensor {missing!r} of it")
        param, result = params[state_input], results[state_output]
        if param.get_partial_shape().is_dynamic:
            raise UsageError(
                f"{label}: state {state_input} has a dynamic shape {param.get_partial_shape()}; an OpenVINO variable "
                "needs a static one",
                hint=f"fix it with --input-shape {state_input}=...",
            )
        param.set_friendly_name(state_input)  # the variable's id is the two friendly names joined
        result.set_friendly_name(f"{SEPARATOR}{state_output}")
        chosen.append((param, result))
    manager = Manager()
    manager.register_pass(MakeStateful(chosen))
    manager.run_passes(ov_model)


def variables(ov_model) -> list[dict]:
    """The variables of a (read) IR: id, the state pair it holds where gatepack named it, shape, element type."""
    found = []
    for op in ov_model.get_ops():
        if op.get_type_name() != "ReadValue":
            continue
        info = op.get_variable_id() if hasattr(op, "get_variable_id") else op.get_attributes().get("variable_id")
        state_input, _, state_output = str(info).partition(SEPARATOR)
        found.append(
            {
                "variable": str(info),
                "input": state_input if state_output else None,
                "output": state_output or None,
                "shape": [d.get_length() if d.is_static else None for d in op.get_output_partial_shape(0)],
                "dtype": str(op.get_output_element_type(0).to_dtype()),
            }
        )
    return found


def held_states(ov_model) -> dict[str, str]:
    """``Model.meta['states']`` of a stateful IR: state input -> state output per variable gatepack named
    ``IN->OUT``; another producer's variable under its own id on both sides."""
    return {v["input"] or v["variable"]: v["output"] or v["variable"] for v in variables(ov_model)}


def open_session(path: str | Path) -> Callable[[dict], dict]:
    """The IR compiled once for CPU (fp32), at the static shapes of the first call's inputs (as ``run_native``
    reshapes it), and one infer request, its variables at their initial values; each call infers once and returns
    the outputs by name, and each variable named ``IN->OUT`` under ``OUT``."""
    label = str(path)
    session: dict[str, Any] = {}

    def open_for(inputs: dict) -> None:
        ov, _ = openvino()
        ov_model = read_at_fed_shapes(path, inputs)
        core = ov.Core()
        try:
            compiled = core.compile_model(ov_model, "CPU", COMPILE_CONFIG)
        except Exception as err:
            raise RuntimeFailure(f"{label}: OpenVINO CPU cannot compile it: {ov_message(err)}") from None
        request = compiled.create_infer_request()
        request.reset_state()
        # the request needs the model (its weights), the core and the compiled model alive
        session.update(model=ov_model, core=core, compiled=compiled, request=request)
        session["inputs"] = [p.get_any_name() for p in ov_model.inputs]
        session["outputs"] = [o.get_any_name() for o in ov_model.outputs]

    def run(inputs: dict) -> dict:
        if not session:
            open_for(inputs)
        wanted, request = session["inputs"], session["request"]
        missing = [n for n in wanted if n not in inputs]
        if missing:
            raise UsageError(f"{label}: missing input(s) {missing}", hint=f"the model takes {wanted}")
        try:
            results = request.infer([np.require(inputs[n], requirements="C") for n in wanted])
        except Exception as err:
            raise RuntimeFailure(f"{label}: OpenVINO CPU failed: {ov_message(err)}") from None
        found = {name: np.array(results[k]) for k, name in enumerate(session["outputs"])}
        for state in request.query_state():
            _, separator, state_output = state.name.partition(SEPARATOR)
            if separator:
                found[state_output] = np.array(state.state.data)
        return found

    return run
