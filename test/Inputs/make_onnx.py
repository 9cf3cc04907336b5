"""Builds the small ONNX models the import and driver tests read.

Usage: make_onnx.py NAME OUT.onnx

Each model is made with onnx.helper so that the tests do not depend on
binary files in the repository.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def save(graph, path, opset=OPSET, check=True):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, path)


def init(name, shape, seed=0):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def classifier(batch="batch", out_first="loss"):
    """Flatten -> Gemm -> Relu -> Gemm -> SoftmaxCrossEntropyLoss."""
    nodes = [
        helper.make_node("Flatten", ["input"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc1.weight", "fc1.bias"], ["h"], name="fc1", transB=1),
        helper.make_node("Relu", ["h"], ["a"], name="relu"),
        helper.make_node("Gemm", ["a", "fc2.weight", "fc2.bias"], ["logits"], name="fc2", transB=1),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "target"], ["loss"], name="xent",
                         reduction="mean"),
    ]
    inputs = [
        helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 2, 4]),
        helper.make_tensor_value_info("target", TensorProto.INT64, [batch]),
    ]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
               helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 3])]
    if out_first == "logits":
        outputs.reverse()
    inits = [init("fc1.weight", [6, 8], 1), init("fc1.bias", [6], 2),
             init("fc2.weight", [3, 6], 3), init("fc2.bias", [3], 4)]
    return helper.make_graph(nodes, "classifier", inputs, outputs, inits)


def lm_head():
    """A language-model head over an odd vocabulary: x [2, 8, 32] @ W [32,
    50] -> logits [2, 8, 50], flattened to [16, 50] for the next-token
    loss, as GPT-style models export it."""
    nodes = [
        helper.make_node("MatMul", ["input", "head.weight"], ["logits"], name="head"),
        helper.make_node("Constant", [], ["shape"], name="shape",
                         value=numpy_helper.from_array(np.array([-1, 50], np.int64))),
        helper.make_node("Reshape", ["logits", "shape"], ["flat"], name="flat"),
        helper.make_node("Constant", [], ["tshape"], name="tshape",
                         value=numpy_helper.from_array(np.array([-1], np.int64))),
        helper.make_node("Reshape", ["target", "tshape"], ["labels"], name="labels"),
        helper.make_node("SoftmaxCrossEntropyLoss", ["flat", "labels"], ["loss"],
                         name="xent", reduction="mean"),
    ]
    inputs = [
        helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 8, 32]),
        helper.make_tensor_value_info("target", TensorProto.INT64, [2, 8]),
    ]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    return helper.make_graph(nodes, "lm_head", inputs, outputs,
                             [init("head.weight", [32, 50], 9)])


def attention_scores():
    """Batched MatMuls: x @ Wq and x @ Wk (a shared [8, 8] weight), then
    q @ k^T per batch; the scores' row mean classifies into 4 classes."""
    nodes = [
        helper.make_node("MatMul", ["input", "wq"], ["q"], name="q"),
        helper.make_node("MatMul", ["input", "wk"], ["k"], name="k"),
        helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
        helper.make_node("ReduceMean", ["s"], ["logits"], name="mean", axes=[2],
                         keepdims=0),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "target"], ["loss"],
                         name="xent", reduction="mean"),
    ]
    inputs = [
        helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 4, 8]),
        helper.make_tensor_value_info("target", TensorProto.INT64, [2]),
    ]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    return helper.make_graph(nodes, "attention_scores", inputs, outputs,
                             [init("wq", [8, 8], 7), init("wk", [8, 8], 8)])


def qkv_attention():
    """One self-attention block as GPT-2 exports it: one projection to
    [B, T, 3C] split into query, key and value, each reshaped to heads and
    transposed ([B, H, T, D]; the key to [B, H, D, T]), softmax attention,
    the heads transposed back and merged; the sequence mean classifies into
    C classes."""
    b, t, heads, d = 2, 8, 2, 8
    c = heads * d
    shape = numpy_helper.from_array(np.array([b, t, heads, d], np.int64), "heads")
    merged = numpy_helper.from_array(np.array([b, t, c], np.int64), "merged")
    split = numpy_helper.from_array(np.array([c, c, c], np.int64), "split")
    scale = numpy_helper.from_array(np.array(1.0 / np.sqrt(d), np.float32), "scale")
    nodes = [
        helper.make_node("Constant", [], ["scale"], name="scale", value=scale),
        helper.make_node("MatMul", ["input", "qkv.weight"], ["qkv0"], name="qkv"),
        helper.make_node("Add", ["qkv0", "qkv.bias"], ["qkv1"], name="qkv_bias"),
        helper.make_node("Split", ["qkv1", "split"], ["q", "k", "v"], name="split",
                         axis=2),
        helper.make_node("Reshape", ["q", "heads"], ["q4"], name="q_heads"),
        helper.make_node("Reshape", ["k", "heads"], ["k4"], name="k_heads"),
        helper.make_node("Reshape", ["v", "heads"], ["v4"], name="v_heads"),
        helper.make_node("Transpose", ["q4"], ["qh"], name="q_t", perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k4"], ["kh"], name="k_t", perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v4"], ["vh"], name="v_t", perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qh", "kh"], ["s0"], name="scores"),
        helper.make_node("Mul", ["s0", "scale"], ["s"], name="scaled"),
        helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "vh"], ["oh"], name="mix"),
        helper.make_node("Transpose", ["oh"], ["o4"], name="o_t", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["o4", "merged"], ["o"], name="merge"),
        helper.make_node("ReduceMean", ["o"], ["logits"], name="mean", axes=[1],
                         keepdims=0),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "target"], ["loss"],
                         name="xent", reduction="mean"),
    ]
    inputs = [
        helper.make_tensor_value_info("input", TensorProto.FLOAT, [b, t, c]),
        helper.make_tensor_value_info("target", TensorProto.INT64, [b]),
    ]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    inits = [init("qkv.weight", [c, 3 * c], 11), init("qkv.bias", [3 * c], 12),
             shape, merged, split]
    return helper.make_graph(nodes, "qkv_attention", inputs, outputs, inits)


def view_chains():
    """Three chains of transposes, reshapes and slices over tanh(x) * gain,
    x of [4, 6, 8], concatenated and weighted into a summed loss (the gain's
    gradient flows back through the chains): the fusion
    pass makes the chains' copies strided views where readers can follow
    them (a slice of whole rows of a merged dim, a stepped slice), and not
    where a slice cuts a merged dim between rows."""
    def ints(name, values):
        return numpy_helper.from_array(np.array(values, np.int64), name)

    consts = [ints("a_shape", [8, 24]), ints("a_start", [6]), ints("a_end", [18]),
              ints("axis1", [1]), ints("a_heads", [8, 2, 6]),
              ints("b_start", [0]), ints("b_end", [8]), ints("axis2", [2]),
              ints("step2", [2]), ints("b_rows", [16, 6]), ints("b_shape", [2, 8, 6]),
              ints("c_flat", [192]), ints("c_start", [5]), ints("c_end", [101]),
              ints("axis0", [0]), ints("c_shape", [2, 6, 8])]
    nodes = [
        helper.make_node("Tanh", ["input"], ["t"], name="tanh"),
        helper.make_node("Mul", ["t", "gain"], ["h"], name="gain"),
        helper.make_node("Transpose", ["h"], ["a0"], name="a_t", perm=[2, 0, 1]),
        helper.make_node("Reshape", ["a0", "a_shape"], ["a1"], name="a_merge"),
        helper.make_node("Slice", ["a1", "a_start", "a_end", "axis1"], ["a2"],
                         name="a_rows"),
        helper.make_node("Reshape", ["a2", "a_heads"], ["a3"], name="a_split"),
        helper.make_node("Transpose", ["a3"], ["a"], name="a_back", perm=[1, 2, 0]),
        helper.make_node("Slice", ["h", "b_start", "b_end", "axis2", "step2"], ["b0"],
                         name="b_even"),
        helper.make_node("Transpose", ["b0"], ["b1"], name="b_t", perm=[0, 2, 1]),
        helper.make_node("Reshape", ["b1", "b_rows"], ["b2"], name="b_merge"),
        helper.make_node("Reshape", ["b2", "b_shape"], ["b3"], name="b_split"),
        helper.make_node("Transpose", ["b3"], ["b"], name="b_back", perm=[0, 2, 1]),
        helper.make_node("Transpose", ["h"], ["c0"], name="c_t", perm=[1, 0, 2]),
        helper.make_node("Reshape", ["c0", "c_flat"], ["c1"], name="c_flatten"),
        helper.make_node("Slice", ["c1", "c_start", "c_end", "axis0"], ["c2"],
                         name="c_cut"),
        helper.make_node("Reshape", ["c2", "c_shape"], ["c"], name="c_split"),
        helper.make_node("Concat", ["a", "b", "c"], ["abc"], name="concat", axis=0),
        helper.make_node("Mul", ["abc", "weight"], ["weighted"], name="weigh"),
        helper.make_node("ReduceSum", ["weighted"], ["loss"], name="sum", keepdims=0),
    ]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [4, 6, 8])]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    return helper.make_graph(nodes, "view_chains", inputs, outputs,
                             [init("weight", [6, 6, 8], 13), init("gain", [6, 8], 14)]
                             + consts)


def gelu_mlp():
    """Gemm -> GELU written out as ONNX exports it (Div, Erf, Add, Mul, Mul)
    -> Gemm -> SoftmaxCrossEntropyLoss: chains of elementwise ops forward
    and backward."""
    nodes = [
        helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["h"], name="fc1",
                         transB=1),
        helper.make_node("Div", ["h", "sqrt2"], ["hs"], name="div"),
        helper.make_node("Erf", ["hs"], ["e"], name="erf"),
        helper.make_node("Add", ["e", "one"], ["e1"], name="add"),
        helper.make_node("Mul", ["h", "e1"], ["m"], name="mul"),
        helper.make_node("Mul", ["m", "half"], ["a"], name="mul_half"),
        helper.make_node("Gemm", ["a", "fc2.weight", "fc2.bias"], ["logits"], name="fc2",
                         transB=1),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "target"], ["loss"],
                         name="xent", reduction="mean"),
    ]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [4, 8]),
              helper.make_tensor_value_info("target", TensorProto.INT64, [4])]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    consts = [numpy_helper.from_array(np.array(v, dtype=np.float32), n)
              for n, v in (("sqrt2", 1.4142135), ("one", 1.0), ("half", 0.5))]
    return helper.make_graph(nodes, "gelu_mlp", inputs, outputs,
                             [init("fc1.weight", [16, 8], 1), init("fc1.bias", [16], 2),
                              init("fc2.weight", [3, 16], 3), init("fc2.bias", [3], 4)]
                             + consts)


def conv_classifier():
    """Conv -> Relu -> Conv (stride 2, no bias) -> Flatten -> Gemm -> loss."""
    nodes = [
        helper.make_node("Conv", ["input", "conv1.weight", "conv1.bias"], ["c1"], name="conv1",
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["a1"], name="relu"),
        helper.make_node("Conv", ["a1", "conv2.weight"], ["c2"], name="conv2",
                         strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Flatten", ["c2"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "target"], ["loss"], name="xent",
                         reduction="mean"),
    ]
    inputs = [
        helper.make_tensor_value_info("input", TensorProto.FLOAT, [4, 2, 8, 8]),
        helper.make_tensor_value_info("target", TensorProto.INT64, [4]),
    ]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
               helper.make_tensor_value_info("logits", TensorProto.FLOAT, [4, 3])]
    inits = [init("conv1.weight", [4, 2, 3, 3], 1), init("conv1.bias", [4], 2),
             init("conv2.weight", [6, 4, 3, 3], 3), init("fc.weight", [3, 96], 4),
             init("fc.bias", [3], 5)]
    return helper.make_graph(nodes, "conv_classifier", inputs, outputs, inits)


def logits_only():
    """The classifier without its loss: the first output is the logits."""
    g = classifier(batch=4)
    del g.node[-1]
    del g.input[1]
    out = [o for o in g.output if o.name == "logits"]
    del g.output[:]
    g.output.extend(out)
    return g


def regressor():
    """Gemm -> Tanh with a [4, 2] prediction and no loss."""
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc", transB=1),
             helper.make_node("Tanh", ["h"], ["pred"], name="tanh")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])]
    outputs = [helper.make_tensor_value_info("pred", TensorProto.FLOAT, [4, 2])]
    return helper.make_graph(nodes, "regressor", inputs, outputs,
                             [init("w", [2, 3], 5), init("b", [2], 6)])


def shapes():
    """Reshape (0 and -1), Transpose, Pad with a Constant pads input."""
    nodes = [
        helper.make_node("Constant", [], ["shape"], name="shape_const",
                         value=numpy_helper.from_array(np.array([0, -1, 2], np.int64))),
        helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        helper.make_node("Transpose", ["r"], ["t"], name="transpose", perm=[0, 2, 1]),
        helper.make_node("Constant", [], ["pads"], name="pads_const",
                         value=numpy_helper.from_array(np.array([0, 1, 0, 0, 1, 0], np.int64))),
        helper.make_node("Pad", ["t", "pads"], ["p"], name="pad", mode="constant"),
        helper.make_node("Mul", ["p", "w"], ["m"], name="scale"),
        helper.make_node("ReduceSum", ["m"], ["loss"], name="sum", keepdims=0),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    return helper.make_graph(nodes, "shapes", inputs, outputs, [init("w", [2, 4, 6])])


def mod_shapes():
    """Reshape targets computed with Mod of constants, as PyTorch 2.9+
    exports nn.MultiheadAttention's head split: fmod 0 takes the divisor's
    sign (Python's %), fmod 1 the dividend's (C's fmod)."""
    def const(name, values):
        return helper.make_node("Constant", [], [name], name=name + "_const",
                                value=numpy_helper.from_array(np.array(values, np.int64)))
    nodes = [
        const("a", [-10, 14]), const("b", [4, 5]), const("c", [14, 27]),
        const("d", [-4, 5]), const("k1", [1, 3]), const("k2", [1, 6]),
        helper.make_node("Mod", ["a", "b"], ["m0"], name="mod_python"),
        helper.make_node("Mod", ["c", "d"], ["m1"], name="mod_c", fmod=1),
        helper.make_node("Mul", ["m0", "k1"], ["s0"], name="shape0"),
        helper.make_node("Mul", ["m1", "k2"], ["s1"], name="shape1"),
        helper.make_node("Reshape", ["x", "s0"], ["r0"], name="reshape0"),
        helper.make_node("Tanh", ["r0"], ["t"], name="tanh"),
        helper.make_node("Reshape", ["t", "s1"], ["r1"], name="reshape1"),
        helper.make_node("ReduceSum", ["r1"], ["loss"], name="sum", keepdims=0),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    return helper.make_graph(nodes, "mod_shapes", inputs, outputs, [])


def whole_slices():
    """GPT's causal mask cut to the sequence: Slice of the whole [1, 1, 4,
    4] buffer (ends past the dims), then a real cut of the last dim."""
    c = lambda name, v: helper.make_node(
        "Constant", [], [name], name=name,
        value=numpy_helper.from_array(np.array(v, np.int64)))
    nodes = [
        c("zero2", [0, 0]), c("ends", [4, np.iinfo(np.int64).max]),
        c("axes", [2, 3]), c("zero", [0]), c("two", [2]), c("three", [3]),
        helper.make_node("Slice", ["x", "zero2", "ends", "axes"], ["whole"],
                         name="whole"),
        helper.make_node("Slice", ["whole", "zero", "two", "three"], ["cut"],
                         name="cut"),
        helper.make_node("ReduceSum", ["cut"], ["loss"], name="sum",
                         keepdims=0),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                            [1, 1, 4, 4])]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    return helper.make_graph(nodes, "whole_slices", inputs, outputs, [])


def slice_to_end():
    """The flatten torch exports for `x.view(-1, x.size(-1))` with a dynamic
    batch: Shape -> Slice(starts -1, ends INT64_MAX) -> Squeeze -> Unsqueeze
    -> Concat with -1 -> Reshape."""
    c = lambda name, v: helper.make_node(
        "Constant", [], [name], name=name,
        value=numpy_helper.from_array(np.array(v, np.int64)))
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        c("starts", [-1]), c("ends", [np.iinfo(np.int64).max]), c("zero", [0]),
        c("minus_one", [-1]),
        helper.make_node("Slice", ["s", "starts", "ends", "zero"], ["last"], name="slice"),
        helper.make_node("Squeeze", ["last", "zero"], ["d"], name="squeeze"),
        helper.make_node("Unsqueeze", ["d", "zero"], ["d1"], name="unsqueeze"),
        helper.make_node("Concat", ["minus_one", "d1"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="flatten"),
        helper.make_node("Mul", ["flat", "flat"], ["sq"], name="square"),
        helper.make_node("ReduceSum", ["sq"], ["loss"], name="sum", keepdims=0),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 5])]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    return helper.make_graph(nodes, "slice_to_end", inputs, outputs, [])


def unsupported():
    g = classifier(batch=4)
    g.node.insert(3, helper.make_node("LpNormalization", ["a"], ["a_norm"], name="my_norm"))
    g.node[4].input[0] = "a_norm"
    return g


def pow_classifier(exponent):
    """The classifier with Pow(relu output, exponent) before fc2: the
    exponent an initializer holding `exponent`, or the relu output itself
    for the string "runtime"."""
    g = classifier(batch=4)
    if isinstance(exponent, str):
        name = "a"
    else:
        name = "exponent"
        g.initializer.append(numpy_helper.from_array(np.asarray(exponent), name))
    g.node.insert(3, helper.make_node("Pow", ["a", name], ["a_pow"], name="pow"))
    g.node[4].input[0] = "a_pow"
    return g


def external(path, location):
    """fc1.weight stored outside the protobuf at `location`."""
    g = classifier(batch=4)
    weight = g.initializer[0]
    data = numpy_helper.to_array(weight).tobytes()
    target = os.path.join(os.path.dirname(path), location)
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    with open(target, "wb") as f:
        f.write(data)
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in [("location", location), ("offset", "0"), ("length", str(len(data)))]:
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    return g


def malformed(kind):
    """The classifier broken in one way the ONNX checker lets through."""
    if kind == "conv-bias":  # conv1 has 4 output channels, its bias 3
        g = conv_classifier()
        g.initializer[1].CopyFrom(init("conv1.bias", [3], 2))
        return g
    if kind == "conv-zero-stride":
        g = conv_classifier()
        del g.node[2].attribute[:]
        g.node[2].attribute.extend([helper.make_attribute("strides", [0, 0]),
                                    helper.make_attribute("pads", [1, 1, 1, 1])])
        return g
    g = classifier(batch=4)
    if kind == "init-size":  # fc1.weight's data is [6, 8], its dims say [2, 8]
        g.initializer[0].dims[0] = 2
    elif kind == "concat-axis":  # the shape [4, 2, 4] twice along axis 3
        g.node.insert(0, helper.make_node("Shape", ["input"], ["shape"], name="shape"))
        g.node.insert(1, helper.make_node("Concat", ["shape", "shape"], ["twice"],
                                          name="twice", axis=3))
        g.node.insert(2, helper.make_node("Reshape", ["input", "twice"], ["reshaped"],
                                          name="reshape"))
        g.node[3].input[0] = "reshaped"
    elif kind == "matmul-scalar":  # a scalar times the hidden activations
        g.node.insert(0, helper.make_node(
            "Constant", [], ["two"], name="two",
            value=numpy_helper.from_array(np.array(2, np.float32))))
        g.node.insert(4, helper.make_node("MatMul", ["two", "a"], ["a2"], name="scalar_matmul"))
        g.node[5].input[0] = "a2"
    return g


def main():
    name, path = sys.argv[1], sys.argv[2]
    if name == "classifier":
        save(classifier(), path)
    elif name == "classifier-static":
        save(classifier(batch=4), path)
    elif name == "conv-classifier-static":
        save(conv_classifier(), path)
    elif name == "logits-first":
        save(classifier(batch=4, out_first="logits"), path)
    elif name == "classifier-ignore":
        g = classifier(batch=4)
        g.node[-1].attribute.append(helper.make_attribute("ignore_index", -100))
        save(g, path)
    elif name == "lm-head":
        save(lm_head(), path)
    elif name == "attention-scores":
        save(attention_scores(), path)
    elif name == "qkv-attention":
        save(qkv_attention(), path)
    elif name == "view-chains":
        save(view_chains(), path)
    elif name == "gelu-mlp":
        save(gelu_mlp(), path)
    elif name == "logits-only":
        save(logits_only(), path)
    elif name == "regressor":
        save(regressor(), path)
    elif name == "shapes":
        save(shapes(), path)
    elif name == "whole-slices":
        save(whole_slices(), path)
    elif name == "slice-to-end":
        save(slice_to_end(), path)
    elif name == "mod-shapes":
        save(mod_shapes(), path)
    elif name == "pow-minus-three":
        save(pow_classifier(np.float32(-3)), path)
    elif name == "pow-fractional":
        save(pow_classifier(np.float32(1.5)), path)
    elif name == "pow-tensor":
        save(pow_classifier(np.full([6], 2, np.float32)), path)
    elif name == "pow-runtime":
        save(pow_classifier("runtime"), path)
    elif name == "unsupported":
        save(unsupported(), path)
    elif name == "external-inside":
        save(external(path, "weights/fc1.bin"), path, check=False)
    elif name == "external-outside":
        save(external(path, "../outside.bin"), path, check=False)
    elif name.startswith("malformed-"):
        save(malformed(name[len("malformed-"):]), path)
    elif name == "truncated":
        save(classifier(batch=4), path)
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
    elif name == "garbage":
        with open(path, "wb") as f:
            f.write(b"this is not a protobuf \xff\xfe\x00\x01" * 8)
    else:
        sys.exit("unknown model " + name)


if __name__ == "__main__":
    main()
