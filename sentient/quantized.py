"""The embedding model's encoder with int8 dense layers, run by onnxruntime: how a whole index is
embedded, 2-3x as fast as the float32 pass in numpy (embedding.py; short texts 2x, windows of
64 tokens 3x), whose vectors it follows to a cosine of 0.99 or more (tests/test_semantic.py;
recall: docs/benchmarks.md).

The graph is written here, from the weights embedding.py already holds (ONNX is a protobuf; a
few dozen lines write the messages it needs, where the `onnx` package would be one more large
dependency). Each dense layer's matrix is quantized once, to int8 by column (its largest value
63: WEIGHT_RANGE); onnxruntime's DynamicQuantizeMatMul quantizes the activations it multiplies,
by tensor. A text goes through the graph alone, so that tensor is the text's own: its vector
depends on nothing embedded beside it, however the texts are batched (and no text is padded). Attention,
the layer norms and the GELU stay float32. The word embeddings stay with numpy (memory-mapped,
shared by every process): the graph takes each text's embedded tokens.

One thread per session run, no thread pool of onnxruntime's own: the caller's threads are the
parallelism (embedding.threads()), as for the numpy pass.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FLOAT, UINT8, INT8, INT64 = 1, 2, 3, 7  # TensorProto.DataType
_TYPES = {"float32": FLOAT, "uint8": UINT8, "int8": INT8, "int64": INT64}
_ATTRIBUTE_FLOAT, _ATTRIBUTE_INT, _ATTRIBUTE_INTS = 1, 2, 7  # AttributeProto.AttributeType
OPSET = 17  # LayerNormalization's; onnxruntime 1.17 runs up to 20
MICROSOFT = "com.microsoft"  # DynamicQuantizeMatMul and FastGelu: onnxruntime's own operators
# Weights in 7 bits, not 8: on CPUs without VNNI (AVX2), onnxruntime multiplies uint8 activations by
# int8 weights two pairs at a time into 16 bits, which 255 * 127 * 2 overflows and 255 * 63 * 2 does
# not; so no CPU's vectors are spoiled by saturation (they still differ from one CPU to another
# in the last bits of the float32 parts). (Against the float32 pass: a mean cosine of
# 0.9966 where 8 bits gave 0.9972.)
WEIGHT_RANGE = 63
# The graph as encoder() writes it, kept beside the cached weights under this name (embedding.py):
# a change to what encoder() writes must change it, so that no process runs a graph kept before;
# and, since the vectors change with it, the model's id too (embedding._named), so that every
# document is embedded again rather than mixed with vectors of the graph before.
GRAPH = f"int8-{WEIGHT_RANGE}-graph1"


# --- protobuf, the few messages an ONNX model needs -----------------------------------------

def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # a negative int64 as protobuf writes it: ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, value: int | float | str | bytes) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    if isinstance(value, float):
        return _varint(number << 3 | 5) + struct.pack("<f", value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _message(*fields: bytes) -> bytes:
    return b"".join(fields)


def tensor(name: str, array: Any) -> bytes:
    """TensorProto: dims (1), data_type (2), name (8), raw_data (9), little-endian."""
    kind = _TYPES[array.dtype.name]
    raw = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    return _message(*(_field(1, int(dim)) for dim in array.shape), _field(2, kind), _field(8, name), _field(9, raw))


def node(op: str, inputs: Iterable[str], outputs: Iterable[str], domain: str = "", **attributes: Any) -> bytes:
    """NodeProto: input (1), output (2), op_type (4), attribute (5), domain (7)."""
    said = []
    for name, value in attributes.items():
        if isinstance(value, float):
            typed = _message(_field(2, value), _field(20, _ATTRIBUTE_FLOAT))
        elif isinstance(value, int):
            typed = _message(_field(3, value), _field(20, _ATTRIBUTE_INT))
        else:
            typed = _message(*(_field(8, int(item)) for item in value), _field(20, _ATTRIBUTE_INTS))
        said.append(_field(5, _message(_field(1, name), typed)))
    return _message(*(_field(1, name) for name in inputs), *(_field(2, name) for name in outputs), _field(4, op),
                    *said, *([_field(7, domain)] if domain else []))


def value(name: str, dims: Iterable[int | str], kind: int = FLOAT) -> bytes:
    """ValueInfoProto of a tensor: a dimension by its size, or named (any size)."""
    shape = _message(*(_field(1, _field(2 if isinstance(dim, str) else 1, dim)) for dim in dims))
    return _message(_field(1, name), _field(2, _field(1, _message(_field(1, kind), _field(2, shape)))))


def model(nodes: list[bytes], initializers: list[bytes], inputs: list[bytes], outputs: list[bytes]) -> bytes:
    """ModelProto (IR version 8) of one graph, with the standard and Microsoft operator sets."""
    graph = _message(*(_field(1, item) for item in nodes), _field(2, "encoder"),
                     *(_field(5, item) for item in initializers), *(_field(11, item) for item in inputs),
                     *(_field(12, item) for item in outputs))
    sets = [_field(8, _message(_field(1, domain), _field(2, version))) for domain, version in (("", OPSET),
                                                                                              (MICROSOFT, 1))]
    return _message(_field(1, 8), _field(2, "sentient"), *sets, _field(7, graph))


# --- the encoder ----------------------------------------------------------------------------

def quantize(numpy: Any, matrix: Any) -> tuple[Any, Any]:
    """A dense layer's matrix ([in, out]) as int8 by column, its largest value WEIGHT_RANGE, and
    each column's scale."""
    scale = numpy.abs(matrix).max(axis=0) / numpy.float32(WEIGHT_RANGE)
    scale = numpy.where(scale > 0, scale, numpy.float32(1)).astype(numpy.float32)
    return numpy.clip(numpy.rint(matrix / scale), -WEIGHT_RANGE, WEIGHT_RANGE).astype(numpy.int8), scale


def encoder(numpy: Any, layers: list[Any], norm: tuple[Any, Any], heads: int, epsilon: float) -> bytes:
    """The ONNX model of BERT's encoder for one text: input `x` (tokens x width: its tokens'
    word, position and type embeddings added), output `pooled` (1 x width: the sum of the last
    hidden states). `layers` are embedding._Layer (query, key and value in one matrix, the
    query's already scaled); `norm` the embeddings' layer norm (weight, bias)."""
    width = norm[0].shape[0]
    nodes: list[bytes] = []
    weights: list[bytes] = []

    def const(name: str, array: Any) -> str:
        weights.append(tensor(name, numpy.array(array, order="C")))  # not ascontiguousarray: a scalar stays one
        return name

    def dense(x: str, name: str, matrix: Any, bias: Any) -> str:
        quantized, scale = quantize(numpy, matrix)
        nodes.append(node("DynamicQuantizeMatMul", [x, const(f"{name}.q", quantized), const(f"{name}.scale", scale),
                                                     const(f"{name}.zero", numpy.zeros(scale.shape, numpy.int8)),
                                                     const(f"{name}.bias", bias)], [name], MICROSOFT))
        return name

    def layer_norm(x: str, name: str, weight: Any, bias: Any) -> str:
        nodes.append(node("LayerNormalization", [x, const(f"{name}.weight", weight), const(f"{name}.bias", bias)],
                          [name], axis=-1, epsilon=float(epsilon)))
        return name

    const("heads", numpy.array([-1, 3, heads, width // heads], numpy.int64))
    const("rows", numpy.array([-1, width], numpy.int64))
    for part in range(3):
        const(f"part{part}", numpy.array(part, numpy.int64))
    const("first", numpy.array([0], numpy.int64))
    x = layer_norm("x", "embedded", *norm)
    for number, layer in enumerate(layers):
        at = f"layer{number}"
        qkv = dense(x, f"{at}.qkv", layer.qkv, layer.qkv_bias)  # tokens x 3 * width
        nodes.append(node("Reshape", [qkv, "heads"], [f"{at}.split"]))
        nodes.append(node("Transpose", [f"{at}.split"], [f"{at}.parts"], perm=[1, 2, 0, 3]))  # 3 x heads x tokens x w
        for part, name in enumerate(("query", "key", "value")):
            nodes.append(node("Gather", [f"{at}.parts", f"part{part}"], [f"{at}.{name}"], axis=0))
        nodes.append(node("Transpose", [f"{at}.key"], [f"{at}.keyT"], perm=[0, 2, 1]))
        nodes.append(node("MatMul", [f"{at}.query", f"{at}.keyT"], [f"{at}.scores"]))
        nodes.append(node("Softmax", [f"{at}.scores"], [f"{at}.weights"], axis=-1))
        nodes.append(node("MatMul", [f"{at}.weights", f"{at}.value"], [f"{at}.context"]))  # heads x tokens x w
        nodes.append(node("Transpose", [f"{at}.context"], [f"{at}.contextT"], perm=[1, 0, 2]))
        nodes.append(node("Reshape", [f"{at}.contextT", "rows"], [f"{at}.attended"]))
        out = dense(f"{at}.attended", f"{at}.output", layer.output, layer.output_bias)
        nodes.append(node("Add", [x, out], [f"{at}.residual"]))
        x = layer_norm(f"{at}.residual", f"{at}.norm", layer.output_norm, layer.output_norm_bias)
        inner = dense(x, f"{at}.inner", layer.inner, layer.inner_bias)
        nodes.append(node("FastGelu", [inner], [f"{at}.gelu"], MICROSOFT))  # the tanh form, as the model's
        down = dense(f"{at}.gelu", f"{at}.down", layer.down, layer.down_bias)
        nodes.append(node("Add", [x, down], [f"{at}.residual2"]))
        x = layer_norm(f"{at}.residual2", f"{at}.norm2", layer.down_norm, layer.down_norm_bias)
    nodes.append(node("ReduceSum", [x, "first"], ["pooled"], keepdims=1))
    return model(nodes, weights, [value("x", ["tokens", width])], [value("pooled", [1, width])])


def session(graph: bytes | Path) -> Any:
    """An onnxruntime session of `graph` (the model, or its file) on the CPU, each run in its
    caller's thread alone."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only: its notes on the graph are not the user's concern
    return onnxruntime.InferenceSession(graph if isinstance(graph, bytes) else str(graph), options,
                                        providers=["CPUExecutionProvider"])
