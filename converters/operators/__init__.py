"""Whole ONNX models translated operator by operator, for any target that takes a whole model from ONNX.

* ``table`` — one table of ONNX operators: per operator type, one ``OnnxOp`` per target (its emitter, the
  attributes it honours, the opsets it implements). A target's entries are registered by its own package
  (Core ML's ``formats/coreml/onnx_ops``, LiteRT's ``formats/litert/onnx_ops``); a new ONNX operator is one entry
  per target.
* ``translation`` — what every target shares: ``Translation`` (the values of a graph being translated and how
  an emitter reads its inputs and attributes), ``Untranslatable`` (a node refused, with its reason), and
  ``translate_nodes``, the walk of a graph: constant folding (onnx's reference implementation), ``Shape`` of a
  static tensor as a constant, the domain, opset and attribute rules, and emitter failures as refusals naming
  the node.
* ``prepared`` — the source as the walk reads it (its layers, the nodes they stand for, the constants only they
  read; ``Prepared.claimer`` hands a layer's nodes to the target's layer writer) and the graph inputs' binding.
* ``whole`` — what each target's whole-model pipeline shares around its own emission: which models it writes
  whole, the report's ``model`` finding from the same translation convert runs (one rule, the target's words in a
  ``WholeTarget``), a layer's inputs from the graph, an ``If`` decided at conversion time as its branch.
* ``einsum`` — an Einsum equation's terms and the roles of its letters in a two-operand product.
"""
