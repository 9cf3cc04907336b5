//===- Passes.td - mtc passes ------------------------------*- tablegen -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#ifndef MTC_PASSES_PASSES_TD
#define MTC_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Training graph construction
//===----------------------------------------------------------------------===//

def AutodiffPass : Pass<"mtc-autodiff", "mlir::ModuleOp"> {
  let summary = "Build the training step by reverse-mode differentiation";
  let description = [{
    Turns `@forward` (first result: the scalar loss) into `@train_step`
    returning the loss and the gradient of every parameter argument that
    reaches the loss through differentiable operands. The VJP of each op comes
    from its `GradientOpInterface`; gradients of values used several times
    are summed. Parameters no gradient reaches become buffers. Results with
    role "update" (buffers the forward overwrites, such as BatchNorm running
    statistics) are kept after the gradients; other forward results are
    dropped.

    `freeze` and `train` choose the trained parameters by ONNX name (glob
    patterns); frozen ones get no gradient (and so no optimizer state). A
    pattern that matches no parameter is an error.

    `loss-scaling` seeds the backward pass with a new float32 scalar
    argument `loss_scale` (role "loss_scale", written by the trainer before
    each step) instead of 1, so every gradient is that of `loss * scale`.

    Example: `mtc-opt --mtc-autodiff="freeze=encoder.*" model.mlir`
  }];
  let dependentDialects = ["::mtc::MtcDialect"];
  let options = [
    Option<"function", "function", "std::string", "\"forward\"",
           "Name of the forward function to differentiate">,
    ListOption<"freeze", "freeze", "std::string",
               "Glob patterns of parameter names to keep frozen (buffers)">,
    ListOption<"train", "train", "std::string",
               "Glob patterns of the only parameter names to train">,
    Option<"lossScaling", "loss-scaling", "bool", "false",
           "Seed the backward pass with a loss_scale argument instead of 1">,
  ];
}

def OptimizerPass : Pass<"mtc-optimizer", "mlir::ModuleOp"> {
  let summary = "Append in-place optimizer updates to the training step";
  let description = [{
    For every gradient result of `@train_step`, adds the update of its
    parameter (SGD with optional (Nesterov) momentum and weight decay, or
    AdamW), new state arguments named `<param>.<slot>`, and results tied to
    the parameter and state arguments they overwrite. With `accumulate`
    K > 1, each gradient first goes into an accumulator argument
    (`<param>.grad_accum`) and the updates run on the last of K
    micro-batches with the mean gradient.

    Without accumulation, each update runs as soon as its gradient is
    complete and nothing after it reads the parameter, and the gradient is
    no longer a result of the step: its memory is released right there, so
    gradient memory does not scale with the model. `keep-grads` keeps the
    gradients as results instead (and the updates at the end).

    When `@train_step` has a `loss_scale` argument (autodiff's
    `loss-scaling`), the gradients are scaled: an `mtc.grad_check` reads
    every gradient the updates consume and yields [1 / scale, overflow]
    (also a result of the step, role "grad_status"); each update unscales
    its gradient with it and changes nothing when a gradient is inf or NaN.
    So the updates wait for the last gradient. The trainer's scale policy
    (`loss-scale-growth`, `loss-scale-backoff`, `loss-scale-interval`,
    initial `loss-scale-init`) is recorded on the function.

    Example: `mtc-opt --mtc-optimizer="optimizer=adamw lr=0.001"`
  }];
  let dependentDialects = ["::mtc::MtcDialect"];
  let options = [
    Option<"optimizer", "optimizer", "std::string", "\"sgd\"",
           "Update rule: sgd or adamw">,
    Option<"lr", "lr", "double", "0.01", "Learning rate">,
    Option<"momentum", "momentum", "double", "0.0", "SGD momentum">,
    Option<"nesterov", "nesterov", "bool", "false", "SGD Nesterov momentum">,
    Option<"weightDecay", "weight-decay", "double", "0.0",
           "Weight decay (L2 for SGD, decoupled for AdamW)">,
    Option<"beta1", "beta1", "double", "0.9", "AdamW first-moment decay">,
    Option<"beta2", "beta2", "double", "0.999", "AdamW second-moment decay">,
    Option<"eps", "eps", "double", "1e-8", "AdamW denominator epsilon">,
    Option<"accumulate", "accumulate", "int64_t", "1",
           "Micro-batches per optimizer step (gradient accumulation)">,
    Option<"keepGrads", "keep-grads", "bool", "false",
           "Keep every gradient until the end of the step (as results), "
           "for the trainer's --dump-grads">,
    Option<"lossScaleInit", "loss-scale-init", "double", "65536.0",
           "Initial loss scale (with a loss_scale argument)">,
    Option<"lossScaleGrowth", "loss-scale-growth", "double", "2.0",
           "Factor the scale grows by after loss-scale-interval clean steps">,
    Option<"lossScaleBackoff", "loss-scale-backoff", "double", "0.5",
           "Factor the scale shrinks by on an overflowing (skipped) step">,
    Option<"lossScaleInterval", "loss-scale-interval", "int64_t", "2000",
           "Consecutive clean steps before the scale grows">,
  ];
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

def PrecisionPass : Pass<"mtc-precision", "mlir::ModuleOp"> {
  let summary = "Run GEMMs and convolutions on bfloat16 or float16 operands";
  let description = [{
    In `@train_step` and `@eval_step`, converts both tensor operands of
    every `mtc.gemm`, `mtc.matmul`, `mtc.conv`, `mtc.conv_backward_data`
    and `mtc.conv_backward_filter` (forward and backward) to the chosen
    16-bit format; the products accumulate in float32 and the result stays
    float32, as does everything else (biases, softmax, norms, pooling,
    reductions, losses, parameters and optimizer state). Each value is
    converted once, before its first such op, and the copy serves every
    later one: a parameter is converted once per step, an activation the
    backward GEMMs or convolutions need is saved in 16 bits. In
    `@train_step`, every other forward value of 4096 or more elements that
    the backward pass reads is kept in 16 bits between the passes (rounded
    after its last forward use, widened back right before its first
    backward use; a linear layer's output is rounded right after its GEMM
    and read rounded by the forward too; so is a linear layer's output
    that only elementwise ops read, a residual add), the logits a 16-bit
    GEMM computes for a softmax cross-entropy are rounded before the loss,
    and a
    linear layer's input gradient (a backward GEMM of the output gradient
    and a parameter's 16-bit copy) is rounded when every reader can read
    it as stored (elementwise ops, a layer norm backward whose saved input
    is 16-bit), all as torch.autocast stores them. A parameter the step
    converts gets a 16-bit copy of its own instead (an argument with role
    `param_copy`), which its AdamW update rewrites with the new parameter
    rounded (`parameter-copies`; frozen weights' copies are formed once
    by the trainer; SGD-updated parameters keep their conversions): the
    same values, without a conversion pass over every weight each step.
    The evaluation function reads the copies too; a frozen weight that
    both functions then leave unread takes no bytes of the arena (the
    memory plan's `staysOffArena`), so `frozen-copies` gives such weights
    their copies even without `parameter-copies`.
    `precision=fp32` changes nothing.

    Example: `mtc-opt --mtc-precision="precision=bf16"`
  }];
  let options = [
    Option<"precision", "precision", "std::string", "\"fp32\"",
           "fp32, bf16 or fp16">,
    Option<"nativeGemm", "native-gemm", "bool", "false",
           "The target's GEMMs read 16-bit operands directly (cuBLAS): mark "
           "the GEMMs and convolutions mtc.native_16bit_gemm, which needs "
           "no widening scratch">,
    Option<"parameterCopies", "parameter-copies", "bool", "true",
           "Keep a 16-bit copy beside each parameter the step converts "
           "(AdamW or frozen), written by its update, instead of converting "
           "it every step">,
    Option<"frozenCopies", "frozen-copies", "bool", "true",
           "Even without parameter-copies, give a 16-bit copy to each frozen "
           "weight that the step and the evaluation only convert, so that "
           "its float32 values leave the arena (the copy takes half their "
           "bytes)">,
  ];
}

def ConvTapsPass : Pass<"mtc-trim-conv-taps", "mlir::ModuleOp"> {
  let summary = "Drop the kernel taps of convolutions that read only padding";
  let description = [{
    A convolution tap that reads padding at every output position (a 3x3
    kernel with padding 1 on a 1x1 map has eight) multiplies zeros. Each
    such convolution becomes one over the smallest window of live taps: its
    weight sliced to that window, its padding shrunk by the dropped taps.
    The outputs are the same; the dropped taps get a zero weight gradient.
    Runs before autodiff.

    Example: `mtc-opt --mtc-trim-conv-taps`
  }];
  let dependentDialects = ["::mtc::MtcDialect"];
  let statistics = [
    Statistic<"numTrimmed", "trimmed-convs",
              "Convolutions trimmed to their live taps">,
  ];
}

def LayerNormFusionPass : Pass<"mtc-fuse-layer-norm", "mlir::ModuleOp"> {
  let summary = "Replace layer norms written out in elementwise ops by one op";
  let description = [{
    Finds `(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * scale
    (+ bias)` with the means over x's trailing dims (kept as 1), eps a
    scalar constant and scale and bias of the normalized dims' shape, as
    exporters before ONNX opset 17 write a layer norm, and makes it one
    `mtc.layer_norm`. Each intermediate must have no other use. Runs
    before autodiff, so the gradient is the layer norm's.

    Example: `mtc-opt --mtc-fuse-layer-norm`
  }];
  let dependentDialects = ["::mtc::MtcDialect"];
  let statistics = [
    Statistic<"numFused", "fused-layer-norms",
              "Layer norms written out made one op">,
  ];
}

def AttentionFusionPass : Pass<"mtc-fuse-attention", "mlir::ModuleOp"> {
  let summary = "Replace softmax attention by one fused, memory-linear op";
  let description = [{
    Finds, in every function, `matmul(softmax(mask(scale * matmul(Q, K^T))),
    V)` with optional dropout on the probabilities: the scale a scalar
    constant multiplying (or dividing) the scores or Q, the mask a `select`
    of -inf by a boolean tensor, K^T a transpose, a `transpose_b` matmul or
    a materialized transpose. Each intermediate must have no other use. The
    chain becomes one `mtc.attention`, whose kernels never store the
    Sq x Sk scores, so neither the forward nor the backward pass holds them.
    Runs before autodiff, so the gradient is `mtc.attention_grad`.

    A mask whose values are known when compiling (constants, and float
    initializers that only feed comparisons and that nothing updates, like
    a causal-mask buffer) and that hides exactly the keys after each query
    (j > i, in every head) becomes the op's `causal` flag: the kernels
    then read no mask. The initializers read get `mtc.compiled_in`, and
    the trainer refuses a checkpoint that changes them.

    Example: `mtc-opt --mtc-fuse-attention`
  }];
  let dependentDialects = ["::mtc::MtcDialect"];
  let statistics = [
    Statistic<"numFused", "fused-attention", "Attention patterns fused">,
    Statistic<"numCausal", "causal-attention",
              "Fused attentions whose mask is causal">,
  ];
}

def FusionPass : Pass<"mtc-fuse-elementwise", "mlir::ModuleOp"> {
  let summary = "Fuse chains of elementwise ops into single kernels";
  let description = [{
    In `@train_step`, `@eval_step` and `@forward`: every run of two or more
    consecutive elementwise ops (relu, tanh, sigmoid, exp, log, neg, sqrt,
    erf, convert, add, sub, mul, div, relu_grad, expand, clip, clip_grad,
    select, dropout, dropout_grad) of one phase whose results share one
    shape becomes one `mtc.fused` op in place of the last one; its results
    are the run's values read elsewhere. Its body holds the ops; code
    generation makes it one loop (one CUDA kernel) that keeps the
    intermediates in registers, so they take no memory. Consecutive ops
    only, so no value is read later than before; an op derived from the
    step's arguments alone (a constant, a weight's transpose or 16-bit
    copy) between two parts of a run moves before it. A forward value
    whose backward readers are all fused kernels that can compute it again
    from what they read anyway is recomputed there and no longer stored. A
    layer norm, transpose, concat or attention whose result only 16-bit
    conversions (or narrowing copies) read stores the 16-bit values itself,
    and an attention backward whose gradients are only narrowed, through
    reshapes and transposes, stores them in 16 bits.
    A run of consecutive optimizer updates of one kind with the same
    hyperparameters, status and phase gets `mtc.update_group` (its length)
    on its first op: code generation makes it one multi-tensor update.
    GEMM epilogues come first: a linear layer's `matmul` + bias `add`
    becomes one `matmul` with a bias, and its weight-gradient `matmul` with
    the `reduce_sum` of its bias gradient one `matmul_bias_grad`. Once the
    kernels are formed, a fused kernel that applies GELU's tanh form to a
    linear layer's result (however the model writes it) joins that GEMM
    as `matmul_gelu`, which also stores the GELU input; a backward kernel
    multiplying the GEMM-computed gradient of that GELU's output by its
    derivative at the stored input joins that GEMM as `matmul_gelu_grad`.
    A layer norm right after the fused op that computes its input gets
    `mtc.row_epilogue`: it runs in that kernel, row by row.
    A sum of zero pads placing their inputs side by side along one axis
    (the gradient of slices that split a value) becomes one `concat`. A
    slice or transpose whose readers all copy through strides (transpose,
    slice, pad, concat, slice_grad, directly or through reshapes) gets
    `mtc.strided_view`: it copies nothing and its readers read its input.
    A concat of attention gradients that nothing else reads (through
    reshapes) gets `mtc.written_in_place`: the attention backward writes
    them into the concat's result through row strides, and the concat
    copies nothing.
    A softmax cross-entropy over [N, C] logits whose log-probabilities only
    its gradient reads becomes, with that gradient (and its 16-bit
    conversion, if that is its one reader), one
    `softmax_cross_entropy_with_grad`: the log-probabilities are never
    stored; one whose log-probabilities nothing reads (evaluation) becomes
    `softmax_cross_entropy_loss`. A batch normalization whose output only a relu or clip reads
    applies it itself, and its backward applies the relu_grad or clip_grad
    whose result only it reads. A fused residual sum (an add of two
    tensors, widened from 16 bits or not, and an optional relu) whose one
    term is a batch normalization's output that nothing else reads becomes
    that batch normalization's `residual` and activation.
    Runs after recomputation and before the memory plan.

    Example: `mtc-opt --mtc-fuse-elementwise`
  }];
  let dependentDialects = ["::mtc::MtcDialect"];
  let statistics = [
    Statistic<"numFused", "fused-kernels", "Fused kernels created">,
    Statistic<"numFusedOps", "fused-ops", "Elementwise ops fused">,
    Statistic<"numBiasEpilogues", "bias-epilogues",
              "Bias adds folded into their GEMM">,
    Statistic<"numBiasGradEpilogues", "bias-grad-epilogues",
              "Bias-gradient sums folded into a weight-gradient GEMM">,
    Statistic<"numGeluEpilogues", "gelu-epilogues",
              "GELU kernels folded into the GEMM computing their input">,
    Statistic<"numGeluGradEpilogues", "gelu-grad-epilogues",
              "GELU-gradient kernels folded into the GEMM computing their "
              "incoming gradient">,
    Statistic<"numAccumulateEpilogues", "accumulate-epilogues",
              "Gradient adds folded into a layer norm or gather backward">,
    Statistic<"numRowEpilogues", "row-epilogues",
              "Layer norms run in the kernel computing their input">,
    Statistic<"numFoldedConversions", "folded-conversions",
              "Ops storing 16 bits themselves instead of a conversion">,
    Statistic<"numRecomputed", "recomputed-values",
              "Saved values recomputed by the backward kernels reading them">,
    Statistic<"numUpdateGroups", "update-groups",
              "Multi-tensor optimizer updates">,
    Statistic<"numConcats", "pad-sum-concats",
              "Sums of zero pads turned into one concat">,
    Statistic<"numStridedViews", "strided-views",
              "Slices and transposes read through strides, not copied">,
    Statistic<"numConcatsInPlace", "concats-in-place",
              "Concats whose inputs are written into their result">,
    Statistic<"numLossWithGrad", "loss-with-grad",
              "Softmax cross-entropies computed with their gradient">,
    Statistic<"numLossOnly", "loss-only",
              "Losses computed without their log-probabilities">,
    Statistic<"numNormActivations", "norm-activations",
              "ReLU / clip (or their gradients) folded into batch norms">,
    Statistic<"numNormResiduals", "norm-residuals",
              "Residual sums (and ReLU) folded into batch norms">,
  ];
}

def RematPass : Pass<"mtc-remat", "mlir::ModuleOp"> {
  let summary = "Recompute activations so the step fits a memory budget";
  let description = [{
    When the most bytes live at one op of `@train_step` exceed `budget`,
    chooses forward values to drop after their last forward use and
    recompute (a clone of their producer, marked `mtc.recompute`) before
    their backward uses, so the peak fits at the fewest added FLOPs (see
    mtc/Passes/Remat.h for the model and the solver). Chains are allowed: a
    clone whose input is gone recomputes that input too. Records
    `mtc.remat_peak` (the peak reached) and `mtc.recompute_flops`.

    Example: `mtc-opt --mtc-remat="budget=1000000"`
  }];
  let options = [
    Option<"budget", "budget", "int64_t", "0",
           "Bytes the live tensors may take at any op (0: no limit)">,
    Option<"alignment", "alignment", "int64_t", "256",
           "Byte alignment of every tensor, as in the memory plan">,
  ];
}

def MemoryPlanPass : Pass<"mtc-memory-plan", "mlir::ModuleOp"> {
  let summary = "Assign every tensor of the step an offset in one arena";
  let description = [{
    Computes the liveness of every value of `@train_step` over its op order
    (arguments and tied results live across steps), then places them in a
    single arena with a best-fit, largest-first heuristic. Records
    `mtc.offset` on arguments, `mtc.offsets` (and `mtc.workspace` for kernel
    scratch) on ops, and `mtc.arena_size` / `mtc.lower_bound` (the maximum
    bytes live at one point) on the function.

    Example: `mtc-opt --mtc-memory-plan`
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", "256",
           "Byte alignment of every tensor">,
    Option<"function", "function", "std::string", "\"train_step\"",
           "The function to plan (forward for inference programs)">,
  ];
}

#endif // MTC_PASSES_PASSES_TD
