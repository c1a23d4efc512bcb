"""Whole ONNX models translated operator by operator, for any target that takes a whole model from ONNX.

* ``table`` — one table of ONNX operators: per operator type, one ``OnnxOp`` per target (its emitter, the
  attributes it honours, the opsets it implements). A target's entries are registered by its own package
  (Core ML's ``formats/coreml/onnx_ops``); a new ONNX operator is one entry per target.
* ``translation`` — what every target shares: ``Translation`` (the values of a graph being translated and how
  an emitter reads its inputs and attributes), ``Untranslatable`` (a node refused, with its reason), and
  ``translate_nodes``, the walk of a graph: constant folding (onnx's reference implementation), ``Shape`` of a
  static tensor as a constant, the domain, opset and attribute rules, and emitter failures as refusals naming
  the node.
"""
