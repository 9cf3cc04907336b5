#!/usr/bin/python3
"""Finite-difference check of mtc's gradient rules through the real compiler and trainer.

For every entry of CASES a tiny ONNX model (opset 17, ir_version 8) is built
with onnx.helper. The op's float inputs are float initializers (so mtc trains
them); shapes, pads, axes and labels are Constant nodes. The loss is
    sum over variants of ReduceSum(Mul(op_output, R), keepdims=0)
with R a Constant of fixed random values. All variants of one op share one
model (one compile); `--separate` compiles each variant alone, which helps
when one variant breaks the compile.

Per model:
    mtc compile m.onnx --target cpu --optimizer sgd --lr 0 -o DIR/trainer
    trainer --steps 0 --save p0.safetensors
    trainer --steps 1 --dump-grads g.safetensors
and per parameter, along a random direction v (|v_i| <= 1):
    trainer --load P(+-h v) --steps 1 --metrics m.jsonl     for h and h/2
The numeric directional derivative is the Richardson extrapolation
(4 D(h/2) - D(h)) / 3 of the central differences D; the analytic one is
<g, P+ - P-> / (2h) combined the same way, using the float32 parameters
actually written, so rounding of P0 +- h v does not count as error.

Usage: gradcheck.py --mtc PATH --work DIR [--op NAME[,NAME...]] [--separate]
       gradcheck.py --check-only --work DIR    (build and validate models only)
Exit status 0 when every check passes, 1 otherwise.
"""

import argparse
import collections
import os
import sys
import time
import zlib

import numpy as np

sys.dont_write_bytecode = True  # keep the source tree clean under lit
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "e2e"))
import mtc_testlib as tl  # noqa: E402

OPSET = 17
IR_VERSION = 8

RTOL = 2e-2          # relative tolerance on the directional derivative
# Largest perturbation of one element: big steps keep float32 loss noise small
# next to the difference; Richardson extrapolation keeps the truncation error
# of smooth ops small. Piecewise-linear ops (Relu, MaxPool) use KINK_STEP and
# inputs placed so that no perturbation reaches a kink or a tie.
STEP = 0.1
KINK_STEP = 0.04
# Absolute floor: float32 loss noise (a few ulps of the loss scale) divided by
# the step; see `tolerance_floor`.
NOISE_ULPS = 8


# ----------------------------------------------------------------------------
# Model building
# ----------------------------------------------------------------------------


class Builder:
    """Collects the nodes and initializers of one variant under a name prefix."""

    def __init__(self, prefix, rng):
        self.prefix = prefix
        self.rng = rng
        self.nodes = []
        self.initializers = collections.OrderedDict()
        self._count = 0

    def _name(self, tag):
        return "%s.%s" % (self.prefix, tag)

    def param(self, tag, value):
        """A float32 initializer (trained, so checked)."""
        name = self._name(tag)
        self.initializers[name] = np.asarray(value, dtype=np.float32)
        return name

    def const(self, tag, value):
        """A Constant node (not trained)."""
        from onnx import helper, numpy_helper
        name = self._name(tag)
        self.nodes.append(helper.make_node(
            "Constant", [], [name], name=name,
            value=numpy_helper.from_array(np.asarray(value), name)))
        return name

    def op(self, op_type, inputs, **attrs):
        from onnx import helper
        self._count += 1
        name = self._name("%s%d" % (op_type, self._count))
        self.nodes.append(helper.make_node(op_type, list(inputs), [name],
                                           name=name, **attrs))
        return name

    # Value generators -------------------------------------------------------

    def randn(self, *shape, scale=1.0):
        return self.rng.standard_normal(shape) * scale

    def uniform(self, lo, hi, *shape):
        return self.rng.uniform(lo, hi, shape)

    def away_from_zero(self, *shape, lo=0.1, hi=1.0):
        """Values with |x| in [lo, hi]: kinks at 0 stay out of reach."""
        sign = np.where(self.rng.random(shape) < 0.5, -1.0, 1.0)
        return sign * self.rng.uniform(lo, hi, shape)

    def distinct(self, *shape, gap=0.2):
        """A random permutation of equally spaced values (no ties in max)."""
        n = int(np.prod(shape))
        values = (np.arange(n) - n / 2.0) * gap
        return self.rng.permutation(values).reshape(shape)


# A case is one variant of one op: `build(b)` returns the op's output name.
# `step` overrides the largest perturbation per element (see STEP).
Case = collections.namedtuple("Case", "op variant build step")


def case(op, variant, build, step=STEP):
    return Case(op, variant, build, step)


def _binary(op_type, a_shape, b_shape, nonzero_b=False):
    def build(b):
        lhs = b.param("A", b.randn(*a_shape))
        rhs_value = b.away_from_zero(*b_shape, lo=1.0, hi=2.0) if nonzero_b \
            else b.randn(*b_shape)
        rhs = b.param("B", rhs_value)
        return b.op(op_type, [lhs, rhs])
    return build


def _unary(op_type, make_value):
    def build(b):
        return b.op(op_type, [b.param("X", make_value(b))])
    return build


def _pow(exponent, make_value):
    """Pow(X, Constant scalar): the exponent as exported models carry it."""
    def build(b):
        return b.op("Pow", [b.param("X", make_value(b)),
                            b.const("e", np.asarray(exponent))])
    return build


def _gemm(a_shape, b_shape, c_shape=None, **attrs):
    def build(b):
        ins = [b.param("A", b.randn(*a_shape)), b.param("B", b.randn(*b_shape))]
        if c_shape is not None:
            ins.append(b.param("C", b.randn(*c_shape)))
        return b.op("Gemm", ins, **attrs)
    return build


def _matmul(a_shape, b_shape):
    def build(b):
        return b.op("MatMul", [b.param("A", b.randn(*a_shape)),
                               b.param("B", b.randn(*b_shape))])
    return build


def _conv(x_shape, w_shape, bias, **attrs):
    def build(b):
        ins = [b.param("X", b.randn(*x_shape)),
               b.param("W", b.randn(*w_shape, scale=0.5))]
        if bias:
            ins.append(b.param("B", b.randn(w_shape[0])))
        return b.op("Conv", ins, **attrs)
    return build


def _pool(op_type, x_shape, **attrs):
    def build(b):
        value = b.distinct(*x_shape) if op_type == "MaxPool" \
            else b.randn(*x_shape)
        return b.op(op_type, [b.param("X", value)], **attrs)
    return build


def _with_const(op_type, x_shape, const_value, **attrs):
    """op(X, Constant) for Reshape (shape) and ReduceSum (axes)."""
    def build(b):
        ins = [b.param("X", b.randn(*x_shape))]
        if const_value is not None:
            ins.append(b.const("c", np.array(const_value, dtype=np.int64)))
        return b.op(op_type, ins, **attrs)
    return build


def _attr_only(op_type, x_shape, **attrs):
    def build(b):
        return b.op(op_type, [b.param("X", b.randn(*x_shape))], **attrs)
    return build


def _pad(x_shape, pads, value):
    def build(b):
        ins = [b.param("X", b.randn(*x_shape)),
               b.const("pads", np.array(pads, dtype=np.int64))]
        if value is not None:
            ins.append(b.const("value", np.array(value, dtype=np.float32)))
        return b.op("Pad", ins, mode="constant")
    return build


def _sce(logits_shape, reduction, ignore_index=None, ignored=0):
    """SoftmaxCrossEntropyLoss; `ignored` labels are set to ignore_index."""
    def build(b):
        n, c = logits_shape[0], logits_shape[1]
        label_shape = (n,) + tuple(logits_shape[2:])
        labels = b.rng.integers(0, c, label_shape)
        if ignored:
            flat = labels.reshape(-1)
            where = b.rng.choice(flat.size, ignored, replace=False)
            flat[where] = ignore_index
        attrs = {"reduction": reduction}
        if ignore_index is not None:
            attrs["ignore_index"] = ignore_index
        return b.op("SoftmaxCrossEntropyLoss",
                    [b.param("scores", b.randn(*logits_shape)),
                     b.const("labels", labels.astype(np.int64))], **attrs)
    return build


def _clip(x_shape, lo, hi):
    """Clip with values kept at least 0.05 away from both bounds."""
    def build(b):
        x = b.uniform(lo - 1.0, hi + 1.0, *x_shape)
        for bound in (lo, hi):
            near = np.abs(x - bound) < 0.05
            x[near] = bound + np.sign(x[near] - bound + 1e-9) * 0.1
        return b.op("Clip", [b.param("X", x),
                             b.const("lo", np.array(lo, dtype=np.float32)),
                             b.const("hi", np.array(hi, dtype=np.float32))])
    return build


def _where(cond_shape, a_shape, b_shape):
    def build(b):
        cond = b.rng.random(cond_shape) < 0.5
        return b.op("Where", [b.const("cond", cond),
                              b.param("A", b.randn(*a_shape)),
                              b.param("B", b.randn(*b_shape))])
    return build


def _batchnorm(x_shape):
    """Training-mode BatchNormalization; the running statistics are
    Constants here (the step copies and updates them)."""
    def build(b):
        from onnx import helper
        c = x_shape[1]
        ins = [b.param("X", b.randn(*x_shape)),
               b.param("scale", b.uniform(0.5, 1.5, c)),
               b.param("bias", b.randn(c)),
               b.const("mean", np.zeros(c, dtype=np.float32)),
               b.const("var", np.ones(c, dtype=np.float32))]
        outs = [b.prefix + ".bn_y", b.prefix + ".bn_mean", b.prefix + ".bn_var"]
        b.nodes.append(helper.make_node(
            "BatchNormalization", ins, outs, name=b.prefix + ".bn",
            epsilon=1e-5, momentum=0.9, training_mode=1))
        return outs[0]
    return build


def _layernorm(x_shape, axis, bias):
    def build(b):
        normalized = x_shape[axis:]
        ins = [b.param("X", b.randn(*x_shape)),
               b.param("scale", b.uniform(0.5, 1.5, *normalized))]
        if bias:
            ins.append(b.param("bias", b.randn(*normalized)))
        return b.op("LayerNormalization", ins, axis=axis, epsilon=1e-5)
    return build


def _dropout(x_shape, ratio):
    """The mask depends only on the seed, the step and the op, so every
    perturbed run of step 1 sees the same mask."""
    def build(b):
        return b.op("Dropout", [b.param("X", b.randn(*x_shape)),
                                b.const("ratio", np.array(ratio, dtype=np.float32)),
                                b.const("train", np.array(True))])
    return build


def _gather(data_shape, indices, axis):
    def build(b):
        return b.op("Gather", [b.param("data", b.randn(*data_shape)),
                               b.const("idx", np.array(indices, dtype=np.int64))],
                    axis=axis)
    return build


def _concat(shapes, axis):
    def build(b):
        ins = [b.param("X%d" % i, b.randn(*shape)) for i, shape in enumerate(shapes)]
        return b.op("Concat", ins, axis=axis)
    return build


def _slice(x_shape, starts, ends, axes, steps):
    def build(b):
        ins = [b.param("X", b.randn(*x_shape))]
        for tag, v in (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps)):
            ins.append(b.const(tag, np.array(v, dtype=np.int64)))
        return b.op("Slice", ins)
    return build


def _axes_op(op_type, x_shape, axes):
    def build(b):
        return b.op(op_type, [b.param("X", b.randn(*x_shape)),
                              b.const("axes", np.array(axes, dtype=np.int64))])
    return build


def _expand(x_shape, shape):
    def build(b):
        return b.op("Expand", [b.param("X", b.randn(*x_shape)),
                               b.const("shape", np.array(shape, dtype=np.int64))])
    return build


CASES = [
    # Gemm
    case("Gemm", "plain", _gemm((3, 4), (4, 5))),
    case("Gemm", "transB_bias", _gemm((3, 4), (5, 4), (5,), transB=1)),
    case("Gemm", "transA_alpha_beta", _gemm((4, 3), (4, 5), (3, 5), transA=1,
                                           alpha=0.5, beta=2.0)),
    case("Gemm", "transAB_C_column", _gemm((4, 3), (5, 4), (3, 1), transA=1,
                                          transB=1, alpha=-1.5, beta=0.7)),
    case("Gemm", "C_scalar", _gemm((3, 4), (4, 5), (1,), beta=0.3)),
    # MatMul
    case("MatMul", "2d", _matmul((3, 4), (4, 5))),
    case("MatMul", "batched_3d", _matmul((2, 3, 4), (2, 4, 5))),
    case("MatMul", "4d_by_2d", _matmul((2, 3, 4, 5), (5, 6))),
    case("MatMul", "2d_by_3d", _matmul((4, 5), (2, 5, 6))),
    # Elementwise binary with broadcasting
    case("Add", "3d_3x1", _binary("Add", (2, 3, 4), (3, 1))),
    case("Add", "3d_4", _binary("Add", (2, 3, 4), (4,))),
    case("Add", "both_broadcast", _binary("Add", (3, 1), (2, 1, 4))),
    case("Sub", "3d_3x1", _binary("Sub", (2, 3, 4), (3, 1))),
    case("Sub", "3d_4", _binary("Sub", (2, 3, 4), (4,))),
    case("Sub", "both_broadcast", _binary("Sub", (3, 1), (2, 1, 4))),
    case("Mul", "3d_3x1", _binary("Mul", (2, 3, 4), (3, 1))),
    case("Mul", "3d_4", _binary("Mul", (2, 3, 4), (4,))),
    case("Mul", "both_broadcast", _binary("Mul", (3, 1), (2, 1, 4))),
    case("Div", "3d_3x1", _binary("Div", (2, 3, 4), (3, 1), nonzero_b=True)),
    case("Div", "3d_4", _binary("Div", (2, 3, 4), (4,), nonzero_b=True)),
    case("Div", "both_broadcast", _binary("Div", (3, 1), (2, 1, 4),
                                          nonzero_b=True)),
    # Elementwise unary
    case("Relu", "3x4", _unary("Relu", lambda b: b.away_from_zero(3, 4)),
         step=KINK_STEP),
    case("Tanh", "3x4", _unary("Tanh", lambda b: b.randn(3, 4))),
    case("Sigmoid", "3x4", _unary("Sigmoid", lambda b: b.randn(3, 4))),
    case("Exp", "3x4", _unary("Exp", lambda b: b.uniform(-1, 1, 3, 4))),
    case("Log", "3x4", _unary("Log", lambda b: b.uniform(0.5, 2, 3, 4))),
    case("Neg", "3x4", _unary("Neg", lambda b: b.randn(3, 4))),
    case("Sqrt", "3x4", _unary("Sqrt", lambda b: b.uniform(0.5, 2, 3, 4))),
    # Pow by a constant scalar exponent (products, square root, reciprocal)
    case("Pow", "cube", _pow(np.float32(3), lambda b: b.randn(3, 4))),
    case("Pow", "square_int64", _pow(np.int64(2), lambda b: b.randn(3, 4))),
    case("Pow", "fifth", _pow(np.float32(5),
                              lambda b: b.uniform(-1.5, 1.5, 3, 4))),
    case("Pow", "minus_two", _pow(np.float32(-2), lambda b: b.away_from_zero(
        3, 4, lo=0.5, hi=1.5))),
    case("Pow", "half", _pow(np.float32(0.5),
                             lambda b: b.uniform(0.5, 2, 3, 4))),
    case("Pow", "minus_half", _pow(np.float32(-0.5),
                                   lambda b: b.uniform(0.5, 2, 3, 4))),
    # Conv (NCHW, OIHW weights)
    case("Conv", "bias", _conv((2, 4, 7, 6), (3, 4, 3, 3), True,
                               kernel_shape=[3, 3])),
    case("Conv", "strides_pads", _conv((2, 4, 7, 6), (5, 4, 3, 2), False,
                                       strides=[2, 1], pads=[1, 0, 2, 1])),
    case("Conv", "dilations", _conv((2, 4, 7, 6), (3, 4, 2, 3), True,
                                    dilations=[2, 1], pads=[1, 1, 1, 1])),
    case("Conv", "group2", _conv((2, 4, 7, 6), (6, 2, 3, 3), True, group=2,
                                 pads=[1, 1, 1, 1], strides=[1, 2],
                                 kernel_shape=[3, 3])),
    case("Conv", "group2_nobias", _conv((2, 4, 6, 6), (4, 2, 2, 2), False,
                                        group=2, strides=[2, 2])),
    # Pooling
    case("MaxPool", "k2s2", _pool("MaxPool", (1, 2, 6, 6), kernel_shape=[2, 2],
                                  strides=[2, 2]), step=KINK_STEP),
    case("MaxPool", "k3s2_pads", _pool("MaxPool", (1, 2, 7, 7),
                                       kernel_shape=[3, 3], strides=[2, 2],
                                       pads=[1, 1, 1, 1]), step=KINK_STEP),
    case("MaxPool", "k3x2_s1x2_asym_pads", _pool(
        "MaxPool", (1, 2, 6, 7), kernel_shape=[3, 2], strides=[1, 2],
        pads=[0, 1, 1, 0]), step=KINK_STEP),
    case("AveragePool", "k2s2", _pool("AveragePool", (2, 3, 6, 6),
                                      kernel_shape=[2, 2], strides=[2, 2])),
    case("AveragePool", "pads_exclude", _pool(
        "AveragePool", (2, 3, 7, 7), kernel_shape=[3, 3], strides=[2, 2],
        pads=[1, 1, 1, 1], count_include_pad=0)),
    case("AveragePool", "pads_include", _pool(
        "AveragePool", (2, 3, 7, 7), kernel_shape=[3, 3], strides=[2, 2],
        pads=[1, 1, 1, 1], count_include_pad=1)),
    case("AveragePool", "asym_pads_exclude", _pool(
        "AveragePool", (2, 3, 6, 7), kernel_shape=[2, 3], strides=[1, 2],
        pads=[0, 1, 1, 0], count_include_pad=0)),
    case("GlobalAveragePool", "2x3x4x5", _pool("GlobalAveragePool",
                                               (2, 3, 4, 5))),
    # Shape manipulation
    case("Flatten", "axis1", _attr_only("Flatten", (2, 3, 4, 5), axis=1)),
    case("Flatten", "axis2", _attr_only("Flatten", (2, 3, 4, 5), axis=2)),
    case("Reshape", "zero_minus1", _with_const("Reshape", (2, 3, 4),
                                               [0, -1, 2])),
    case("Reshape", "minus1_zero", _with_const("Reshape", (2, 3, 4),
                                               [4, 0, -1])),
    case("Transpose", "perm201", _attr_only("Transpose", (2, 3, 4),
                                            perm=[2, 0, 1])),
    case("Transpose", "perm0231", _attr_only("Transpose", (2, 3, 4, 5),
                                             perm=[0, 2, 3, 1])),
    case("Transpose", "default_perm", _attr_only("Transpose", (2, 3, 4))),
    case("Pad", "3d_value", _pad((2, 3, 4), [0, 1, 2, 1, 0, 3], 0.5)),
    case("Pad", "4d_value", _pad((2, 3, 4, 5), [0, 0, 1, 2, 0, 0, 2, 1], -1.5)),
    case("Pad", "default_value", _pad((3, 4), [1, 0, 0, 2], None)),
    # Reductions
    case("ReduceSum", "axis1_keep", _with_const("ReduceSum", (2, 3, 4), [1],
                                                keepdims=1)),
    case("ReduceSum", "axes02_drop", _with_const("ReduceSum", (2, 3, 4),
                                                 [0, 2], keepdims=0)),
    case("ReduceSum", "axis_neg1_drop", _with_const("ReduceSum", (2, 3, 4),
                                                    [-1], keepdims=0)),
    case("ReduceSum", "all_keep", _with_const("ReduceSum", (2, 3, 4), None,
                                              keepdims=1)),
    case("ReduceMean", "axis1_keep", _attr_only("ReduceMean", (2, 3, 4),
                                                axes=[1], keepdims=1)),
    case("ReduceMean", "axes02_drop", _attr_only("ReduceMean", (2, 3, 4),
                                                 axes=[0, 2], keepdims=0)),
    case("ReduceMean", "axis_neg1_keep", _attr_only("ReduceMean", (2, 3, 4),
                                                    axes=[-1], keepdims=1)),
    case("ReduceMean", "all_drop", _attr_only("ReduceMean", (2, 3, 4),
                                              keepdims=0)),
    # Softmax family
    case("Softmax", "axis_neg1", _attr_only("Softmax", (2, 3, 4), axis=-1)),
    case("Softmax", "axis1", _attr_only("Softmax", (2, 3, 4), axis=1)),
    case("LogSoftmax", "axis_neg1", _attr_only("LogSoftmax", (2, 3, 4),
                                               axis=-1)),
    case("LogSoftmax", "axis1", _attr_only("LogSoftmax", (2, 3, 4), axis=1)),
    case("SoftmaxCrossEntropyLoss", "mean_2d", _sce((5, 4), "mean")),
    case("SoftmaxCrossEntropyLoss", "sum_2d", _sce((5, 4), "sum")),
    case("SoftmaxCrossEntropyLoss", "none_2d", _sce((5, 4), "none")),
    case("SoftmaxCrossEntropyLoss", "mean_2d_ignore", _sce(
        (6, 4), "mean", ignore_index=2, ignored=2)),
    case("SoftmaxCrossEntropyLoss", "mean_3d", _sce((3, 4, 5), "mean")),
    case("SoftmaxCrossEntropyLoss", "none_3d_ignore", _sce(
        (3, 4, 5), "none", ignore_index=-1, ignored=4)),
    case("SoftmaxCrossEntropyLoss", "sum_3d_ignore", _sce(
        (3, 4, 5), "sum", ignore_index=-100, ignored=3)),
    # Ops of real models
    case("Erf", "3x4", _unary("Erf", lambda b: b.randn(3, 4))),
    case("Clip", "relu6_like", _clip((3, 4), 0.0, 6.0)),
    case("Clip", "symmetric", _clip((2, 5), -0.5, 0.5)),
    case("Where", "broadcast", _where((3, 4), (2, 3, 4), (4,))),
    case("BatchNormalization", "train_4d", _batchnorm((3, 2, 2, 3))),
    case("BatchNormalization", "train_2d", _batchnorm((4, 3))),
    case("LayerNormalization", "last_axis_bias", _layernorm((2, 3, 4), -1, True)),
    case("LayerNormalization", "axis1_nobias", _layernorm((2, 3, 4), 1, False)),
    case("Dropout", "ratio0.3", _dropout((4, 5), 0.3)),
    case("Gather", "rows_repeated", _gather((5, 3), [[0, 4], [2, 0]], 0)),
    case("Gather", "axis1_negative", _gather((3, 5), [1, -1], 1)),
    case("Concat", "axis1", _concat([(2, 3), (2, 1), (2, 2)], 1)),
    case("Slice", "steps", _slice((4, 6), [1, 0], [3, 5], [0, 1], [1, 2])),
    case("Slice", "negative_start", _slice((4, 6), [-2], [100], [1], [1])),
    case("Unsqueeze", "axes0_3", _axes_op("Unsqueeze", (2, 3), [0, 3])),
    case("Squeeze", "axis1", _axes_op("Squeeze", (2, 1, 3), [1])),
    case("Expand", "3x1_to_2x3x4", _expand((3, 1), [2, 3, 4])),
]


def variant_seed(c):
    return zlib.crc32(("%s/%s" % (c.op, c.variant)).encode())


def build_model(cases):
    """One ONNX model holding every case; returns (model, {case: [params]})."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    builders = []
    for c in cases:
        b = Builder("%s.%s" % (c.op, c.variant),
                    np.random.default_rng(variant_seed(c)))
        out = c.build(b)
        builders.append((c, b, out))

    nodes = [n for _, b, _ in builders for n in b.nodes]
    inits = collections.OrderedDict(
        (k, v) for _, b, _ in builders for k, v in b.initializers.items())
    outputs = [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)
               for _, _, out in builders]
    probe = helper.make_model(
        helper.make_graph(nodes, "probe", [], outputs,
                          [numpy_helper.from_array(v, k)
                           for k, v in inits.items()]),
        opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    probe = onnx.shape_inference.infer_shapes(probe, strict_mode=True)
    shapes = {o.name: [d.dim_value for d in o.type.tensor_type.shape.dim]
              for o in probe.graph.output}

    # loss = sum_k ReduceSum(Mul(out_k, R_k)); the last node writes "loss".
    partial = None
    for k, (c, b, out) in enumerate(builders):
        last = k == len(builders) - 1
        r = b.const("R", b.away_from_zero(*shapes[out], lo=0.5, hi=1.5)
                    .astype(np.float32))
        prod = b.op("Mul", [out, r])
        nodes.extend(b.nodes[-2:])
        term = "loss" if last and partial is None else b.prefix + ".term"
        nodes.append(helper.make_node("ReduceSum", [prod], [term], name=term,
                                      keepdims=0))
        if partial is not None:
            total = "loss" if last else b.prefix + ".sum"
            nodes.append(helper.make_node("Add", [partial, term], [total],
                                          name=total))
            term = total
        partial = term
    graph = helper.make_graph(
        nodes, "gradcheck", [],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION)
    validate(model)
    params = {c: list(b.initializers) for c, b, _ in builders}
    return model, params


def validate(model):
    """checker + strict shape inference; every value must have a static shape."""
    import onnx
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    typed = {v.name: v for v in list(inferred.graph.value_info) +
             list(inferred.graph.output)}
    for node in model.graph.node:
        for out in node.output:
            vi = typed.get(out)
            if vi is None or not vi.type.tensor_type.HasField("shape") or \
                    not all(d.HasField("dim_value")
                            for d in vi.type.tensor_type.shape.dim):
                raise tl.HarnessError("shape inference left %r (%s) without "
                                      "a static shape" % (out, node.op_type))
    out = typed["loss"].type.tensor_type
    if out.elem_type != onnx.TensorProto.FLOAT or len(out.shape.dim) != 0:
        raise tl.HarnessError("loss is not a float scalar")


# ----------------------------------------------------------------------------
# Checking
# ----------------------------------------------------------------------------


def tolerance_floor(loss_scale, step):
    """Absolute error a correct float32 trainer can show on a derivative."""
    return NOISE_ULPS * np.finfo(np.float32).eps * max(loss_scale, 1.0) / step


def loss_at(trainer, work, base, name, value, tag):
    path = os.path.join(work, "p_%s.safetensors" % tag)
    tensors = dict(base)
    tensors[name] = value
    tl.write_safetensors(path, tensors)
    metrics = os.path.join(work, "m_%s.jsonl" % tag)
    tl.run_trainer(trainer, 1, load=path, metrics=metrics)
    return float(tl.read_losses(metrics, 1)[0])


def check_param(trainer, work, base, grad, name, step, rng):
    """Returns (analytic, numeric, d(h), d(h/2), loss scale)."""
    p0 = base[name].astype(np.float64)
    v = rng.standard_normal(p0.shape)
    v /= max(np.max(np.abs(v)), 1e-30)
    g = grad.astype(np.float64)
    central, analytic, scale = [], [], 0.0
    for h in (step, step / 2):
        plus = (p0 + h * v).astype(np.float32)
        minus = (p0 - h * v).astype(np.float32)
        lp = loss_at(trainer, work, base, name, plus, "plus")
        lm = loss_at(trainer, work, base, name, minus, "minus")
        central.append((lp - lm) / (2 * h))
        delta = plus.astype(np.float64) - minus.astype(np.float64)
        analytic.append(float(np.sum(g * delta)) / (2 * h))
        scale = max(scale, abs(lp), abs(lm))
    numeric = (4 * central[1] - central[0]) / 3
    exact = (4 * analytic[1] - analytic[0]) / 3
    return exact, numeric, central[0], central[1], scale


def run_model(args, label, cases, results):
    import onnx
    work = os.path.join(args.work, label)
    os.makedirs(work, exist_ok=True)
    try:
        model, params = build_model(cases)
    except Exception as e:  # a harness bug: report it per case, keep going
        for c in cases:
            results.append((c, "-", None, None, None, False,
                            "model build failed: %s" % e))
        return
    path = os.path.join(work, "model.onnx")
    onnx.save(model, path)
    if args.check_only:
        for c in cases:
            results.append((c, "(model only)", None, None, None, True, ""))
        return

    try:
        trainer = tl.mtc_compile(args.mtc, path, os.path.join(work, "build"),
                                 ["--optimizer", "sgd", "--lr", "0",
                                  "--keep-grads"],
                                 target=args.target)
        p0_path = os.path.join(work, "p0.safetensors")
        tl.run_trainer(trainer, 0, save=p0_path)
        base, _ = tl.read_safetensors(p0_path)
        g_path = os.path.join(work, "grads.safetensors")
        tl.run_trainer(trainer, 1, dump_grads=g_path)
        grads, _ = tl.read_safetensors(g_path)
    except tl.HarnessError as e:
        print(str(e), flush=True)
        for c in cases:
            results.append((c, "-", None, None, None, False,
                            str(e).splitlines()[0]))
        return

    initial = {i.name: onnx.numpy_helper.to_array(i)
               for i in model.graph.initializer}
    for c in cases:
        rng = np.random.default_rng(variant_seed(c) + 1)
        for name in params[c]:
            short = name[len("%s.%s." % (c.op, c.variant)):]
            if name not in base or not np.array_equal(base[name],
                                                      initial[name]):
                results.append((c, short, None, None, None, False,
                                "--steps 0 --save lacks it or changed it"))
                continue
            if name not in grads or grads[name].shape != initial[name].shape:
                results.append((c, short, None, None, None, False,
                                "missing or misshapen in --dump-grads"))
                continue
            try:
                ana, num, d1, d2, scale = check_param(
                    trainer, work, base, grads[name], name, c.step, rng)
            except tl.HarnessError as e:
                print(str(e), flush=True)
                results.append((c, short, None, None, None, False,
                                str(e).splitlines()[0]))
                continue
            floor = tolerance_floor(scale, c.step)
            err = abs(ana - num) / max(abs(ana), abs(num), floor / RTOL)
            ok = bool(np.isfinite(ana) and np.isfinite(num) and
                      abs(ana - num) <= RTOL * max(abs(ana), abs(num)) + floor)
            results.append((c, short, ana, num, err, ok,
                            "floor %.1e" % floor + ("" if ok else
                                                    "  D(h)=%.6g D(h/2)=%.6g"
                                                    % (d1, d2))))
            print_row(results[-1])


def print_row(row):
    c, param, ana, num, err, ok, note = row
    if ana is None:
        print("  %-24s %-22s %-6s %13s %13s %9s  %s  %s" % (
            c.op, c.variant, param, "-", "-", "-", "PASS" if ok else "FAIL",
            note), flush=True)
    else:
        print("  %-24s %-22s %-6s %13.6e %13.6e %9.2e  %s  %s" % (
            c.op, c.variant, param, ana, num, err, "PASS" if ok else "FAIL",
            note), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mtc", help="path to the mtc driver")
    ap.add_argument("--work", required=True, help="scratch directory")
    ap.add_argument("--op", help="comma-separated op names to check "
                                 "(default: all)")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--separate", action="store_true",
                    help="compile each variant as its own model")
    ap.add_argument("--check-only", action="store_true",
                    help="only build and validate the models")
    ap.add_argument("--list", action="store_true", help="list the cases")
    args = ap.parse_args()

    if args.list:
        for c in CASES:
            print("%s %s" % (c.op, c.variant))
        return
    if not args.check_only and not args.mtc:
        ap.error("--mtc is required unless --check-only is given")

    cases = CASES
    if args.op:
        wanted = set(s.strip() for s in args.op.split(",") if s.strip())
        unknown = wanted - set(c.op for c in CASES)
        if unknown:
            ap.error("unknown op(s): %s (known: %s)" % (
                ", ".join(sorted(unknown)),
                ", ".join(sorted(set(c.op for c in CASES)))))
        cases = [c for c in CASES if c.op in wanted]

    groups = collections.OrderedDict()
    for c in cases:
        key = "%s.%s" % (c.op, c.variant) if args.separate else c.op
        groups.setdefault(key, []).append(c)

    os.makedirs(args.work, exist_ok=True)
    start = time.time()
    print("  %-24s %-22s %-6s %13s %13s %9s  %s" % (
        "op", "variant", "param", "analytic", "numeric", "rel err",
        "result"))
    results = []
    for label, group in groups.items():
        t0 = time.time()
        before = len(results)
        run_model(args, label, group, results)
        if args.check_only:
            for row in results[before:]:
                print_row(row)
        elif time.time() - t0 > 60:
            print("  (%s took %.0fs)" % (label, time.time() - t0))

    failed = [r for r in results if not r[5]]
    checked = [r for r in results if r[4] is not None]
    print("")
    print("SUMMARY gradcheck: %s  (%d checks over %d variants of %d ops, "
          "%.0fs)" % ("PASS" if not failed else "FAIL", len(results),
                      len(cases), len(set(c.op for c in cases)),
                      time.time() - start))
    if checked:
        worst = max(checked, key=lambda r: r[4])
        print("  worst rel err %.3e  (%s %s %s)" % (
            worst[4], worst[0].op, worst[0].variant, worst[1]))
    if failed:
        print("  failures:")
        for c, param, _, _, err, _, note in failed:
            print("    - %s %s %s%s %s" % (
                c.op, c.variant, param,
                "" if err is None else " rel err %.3e" % err, note))
        sys.exit(1)


if __name__ == "__main__":
    main()
