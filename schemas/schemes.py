"""The names of the run-time quantization schemes (``QuantizedWeights.dynamic_activations``): how an operator that
quantizes its matrix products' float operands itself computes them. Kept free of numpy, so that the formats'
registration records (read at CLI start-up) can name the schemes their writers hold (``FormatInfo.holds_quantized``);
``schemas.quantized`` words them (``RUN_TIME_SCHEMES``)."""

FLOAT_ACTIVATIONS = ""  # no run-time quantization: integer weights, X and h in float (QDQ, constexpr ops ...)
ORT_DYNAMIC = "onnxruntime uint8"
LITERT_ASYMMETRIC, LITERT_SYMMETRIC = "litert int8 asymmetric", "litert int8 symmetric"
