#!/usr/bin/python3
"""GPU training step time and peak memory: mtc vs PyTorch eager vs torch.compile.

For GPT-2 small (the zoo's GPT decoder at 12 layers, d_model 768, 12 heads,
vocab 50257, sequence 1024, batch 8) and ResNet-50 (torchvision, 224x224,
batch 64), all in bf16 with AdamW on the same data:

* mtc: `mtc compile --target cuda --precision bf16 --optimizer adamw`, the
  trainer's median `time_ms` over steps 3..N (--metrics), its device
  memory (the planned arena, the whole memory of the step known before it
  runs, plus the runtime's cuBLASLt workspace and step counters, which
  the trainer reports) and its first loss;
* PyTorch eager: the same model under torch.autocast(bfloat16) with
  torch.optim.AdamW, median step time (synchronized), peak
  torch.cuda.max_memory_allocated() and the first loss;
* torch.compile of the same module when this PyTorch has it (2.0+); the
  time to compile is reported apart.

The trainer is also run for 5 steps with --profile: its time per kind of
op is printed, and the bandwidth its generated elementwise kernels reach
(bytes of operands and results over their time), and apart that of its
fused kernels ending in a layer norm, is reported against a
device-to-device copy of 1 GiB measured in the same run. Where the model
has GEMMs before a tanh GELU (GPT-2), a third run with --cublaslt-gelu
times them with cuBLASLt's GELU epilogue instead of mtc's GEMM and GELU
kernel, and both times are printed. For GPT-2, mtc's fused attention
(forward and backward of all layers, from that profile) is printed beside
PyTorch's scaled_dot_product_attention at the same sizes in bf16 (2.0+),
with its own choice of kernel and with FlashAttention-2, timed the same way
(events around each call). The first losses
agree within 2e-2 (bf16 forward passes). Ratios are mtc / peer.
`--device cpu --small` runs everything at toy sizes on the CPU (float32;
PyTorch's peak memory is then process RSS), which is how the script itself
is tested without a GPU. `--emulated` runs the toy sizes with mtc's cuda
trainer (bf16, --arch sm_90) built for the CUDA emulation (test/cudaemu)
and PyTorch on the CPU under bf16 autocast: the whole mtc side of the
benchmark, the GPU trainer and its profile included, without a GPU (times
and bandwidths mean nothing there; the first losses must agree). Prints a
Markdown table; `--doc FILE` writes it with this explanation.

A failure of one side (mtc, eager or compiled) is printed and fails the
run, and the other sides are still measured. `--prepare` only exports
the models and builds the trainers (CPU work), so that it can run beside
other GPU work; a later run with the same flags reuses them.

Usage: gpu_bench.py --mtc PATH --work DIR [--models gpt2s,resnet50]
                    [--steps N] [--device cuda|cpu] [--small] [--emulated]
                    [--prepare] [--doc FILE]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "zoo"))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))

LOSS_BAR = 2e-2


def gpt2s(small):
    import models
    import torch
    torch.manual_seed(0)
    if small:
        # An odd vocabulary, as GPT-2's: the logits' rows get padded.
        cfg = dict(vocab=501, d_model=64, nhead=4, num_layers=2, block_size=64)
        batch, seq = 2, 64
    else:
        cfg = dict(vocab=50257, d_model=768, nhead=12, num_layers=12,
                   block_size=1024)
        batch, seq = 8, 1024
    # GPT-2's GELU is the tanh form (cuBLASLt's GELU epilogues).
    model = models._gpt_class()(gelu="tanh", **cfg)
    rng = np.random.default_rng(0)
    x = rng.integers(0, cfg["vocab"], (batch, seq)).astype(np.int64)
    y = rng.integers(0, cfg["vocab"], (batch, seq)).astype(np.int64)
    return model, models.next_token_loss, x, y


def resnet50(small):
    import torch
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet50(num_classes=1000)
    batch, size = (2, 64) if small else (64, 224)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
    y = rng.integers(0, 1000, batch).astype(np.int64)
    return model, None, x, y


MODELS = {"gpt2s": gpt2s, "resnet50": resnet50}

# The attention of the models that have one, as (batch, heads, sequence,
# head dim, layers, causal): what PyTorch's fused attention is timed at
# beside mtc's (attention_side_by_side).
ATTENTION = {"gpt2s": lambda small: (2, 4, 64, 16, 2, True) if small
             else (8, 12, 1024, 64, 12, True)}


def median_after_warmup(times):
    return statistics.median(times[2:] if len(times) > 4 else times)


def compile_mtc(args, name, onnx_path):
    """Builds the trainer (mtc compile: CPU work only) unless --prepare
    built it from these flags; returns its path and the seconds it took."""
    work = os.path.join(args.work, name)
    exe = os.path.join(work, "mtc", "trainer")
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    flags = ["--optimizer", "adamw", "--lr", "1e-4", "--report",
             exe + ".json", "-o", exe]
    if args.device == "cuda" or args.emulated:
        flags += ["--target", "cuda", "--arch", args.arch, "--precision",
                  "bf16"]
    stamp = exe + ".built"
    key = " ".join([args.mtc, onnx_path] + flags)
    if os.path.exists(stamp) and os.path.exists(exe):
        with open(stamp) as f:
            built_key, _, seconds = f.read().rpartition("\n")
        if built_key == key:
            return exe, float(seconds)
    start = time.time()
    r = subprocess.run([args.mtc, "compile", onnx_path] + flags,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError("mtc compile failed: " + r.stderr[-600:])
    build_s = time.time() - start
    with open(stamp, "w") as f:
        f.write("%s\n%.1f" % (key, build_s))
    return exe, build_s


def kind_ms(prof, kind):
    """The ms a step of one kind of op in a --profile output, or None."""
    m = re.search(r"^\s*([0-9.]+)\s+[0-9.]+%\s+\d+\s+[0-9.]+\s+[0-9.]+\s+"
                  + re.escape(kind) + r"$", prof, re.M)
    return float(m.group(1)) if m else None


def run_mtc(args, name, onnx_path, data_dir):
    exe, build_s = compile_mtc(args, name, onnx_path)
    metrics = exe + ".jsonl"
    subprocess.run([exe, "--data", data_dir, "--steps", str(args.steps),
                    "--metrics", metrics], check=True,
                   stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        records = [json.loads(line) for line in f if line.strip()]
    with open(exe + ".json") as f:
        arena = json.load(f)["total_bytes"]
    # A second, short run times every op (--profile): the bandwidth the
    # generated elementwise kernels reach, and the largest ops.
    prof = subprocess.run([exe, "--data", data_dir, "--steps", "5",
                           "--profile"], check=True, stdout=subprocess.PIPE,
                          text=True).stdout
    with open(exe + ".profile.txt", "w") as f:
        f.write(prof)
    # The time per kind of op (attention, GEMMs, fused kernels...) goes to
    # the output too: where the step's time goes on this GPU.
    kinds = prof[prof.find("   ms/step      %    ops     GB/s  GFLOP/s  kind"):]
    kinds = kinds[:kinds.find("   ms/step      %     GB/s")].rstrip()
    if kinds:
        print("  %s: mtc time per kind of op (--profile, no CUDA graph)\n%s"
              % (name, "\n".join(kinds.splitlines()[:16])), flush=True)
    # The GEMMs before a tanh GELU run as a GEMM and mtc's GELU kernel; a
    # third run times them with cuBLASLt's GELU epilogue instead
    # (--cublaslt-gelu), so that each GPU shows which way is faster.
    gelu_ms = kind_ms(prof, "mtc.matmul_gelu")
    gelu_lt_ms = None
    if gelu_ms is not None and (args.device == "cuda" or args.emulated):
        lt = subprocess.run([exe, "--data", data_dir, "--steps", "5",
                             "--profile", "--cublaslt-gelu"], check=True,
                            stdout=subprocess.PIPE, text=True).stdout
        with open(exe + ".profile-cublaslt-gelu.txt", "w") as f:
            f.write(lt)
        gelu_lt_ms = kind_ms(lt, "mtc.matmul_gelu")
        print("  %s: GEMMs before GELU (--profile): GEMM + GELU kernel %.3f "
              "ms, cuBLASLt GELU epilogue %s ms a step" % (
                  name, gelu_ms,
                  "%.3f" % gelu_lt_ms if gelu_lt_ms is not None else "-"),
              flush=True)
    m = re.search(r"elementwise kernels: ([1-9]\d*), [0-9.]+ ms, [0-9.]+ GB "
                  r"moved, ([0-9.]+) GB/s", prof)
    rows = re.search(r"fused kernels ending in a layer norm: \d+, [0-9.]+ ms, "
                     r"[0-9.]+ GB moved, ([0-9.]+) GB/s", prof)
    # Beside the arena: the runtime's library workspace (CUDA), which
    # PyTorch's peak counts for its own cuBLAS workspaces.
    w = re.search(r"the plan needs .*? \((\d+) bytes\) beside the .*? "
                  r"\((\d+) bytes\) of library workspace", prof)
    if not w and (args.device == "cuda" or args.emulated):
        raise RuntimeError("the cuda trainer did not report its library "
                           "workspace")
    if w and int(w.group(1)) != arena:
        raise RuntimeError("the trainer's arena (%s bytes) is not the "
                           "report's (%d)" % (w.group(1), arena))
    workspace = int(w.group(2)) if w else 0
    return {"ms": median_after_warmup([r["time_ms"] for r in records]),
            "bytes": arena + workspace, "workspace": workspace,
            "loss": float(records[0]["loss"]),
            "build_s": build_s,
            "gelu_ms": gelu_ms, "gelu_lt_ms": gelu_lt_ms,
            "attention_ms": kind_ms(prof, "mtc.attention"),
            "attention_grad_ms": kind_ms(prof, "mtc.attention_grad"),
            "elementwise_gbs": float(m.group(2)) if m else None,
            "row_gbs": float(rows.group(1)) if rows else None}


def run_torch(args, model, loss_fn, x, y, compiled):
    """Median step time, peak memory and first loss of PyTorch training."""
    import resource

    import torch
    import mtc_testlib as tl
    device = torch.device(args.device)
    wrapper = tl.make_loss_wrapper(model, loss_fn).to(device)
    wrapper.train()
    opt = torch.optim.AdamW(wrapper.parameters(), lr=1e-4)
    step_fn = wrapper
    compile_s = 0.0
    if compiled:
        start = time.time()
        step_fn = torch.compile(wrapper)
        compile_s = time.time() - start
    xt, yt = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    use_bf16 = args.device == "cuda" or args.emulated
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times, first = [], None
    for i in range(args.steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=args.device, dtype=torch.bfloat16,
                            enabled=use_bf16):
            loss = step_fn(xt, yt)[0]
        loss.float().backward()
        opt.step()
        if args.device == "cuda":
            torch.cuda.synchronize()
        elapsed = 1000.0 * (time.perf_counter() - start)
        if compiled and i == 0:
            compile_s += elapsed / 1000.0  # tracing and codegen happen here
        times.append(elapsed)
        if first is None:
            first = float(loss.item())
    if args.device == "cuda":
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = 1024 * (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss -
                       rss0)
    return {"ms": median_after_warmup(times), "bytes": peak, "loss": first,
            "compile_s": compile_s}


def torch_attention_ms(args, dims, backend):
    """Median ms of one forward and one backward of PyTorch's
    scaled_dot_product_attention at dims (ATTENTION) in bf16 on the device,
    through `backend` (an SDPBackend name, or None for PyTorch's own
    choice); None where this PyTorch or device has no such kernel."""
    import torch
    import torch.nn.functional as F
    if not hasattr(F, "scaled_dot_product_attention"):
        return None
    batch, heads, seq, head_dim, _, causal = dims
    gen = torch.Generator(device=args.device).manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq, head_dim, device=args.device,
                           dtype=torch.bfloat16, generator=gen,
                           requires_grad=True) for _ in range(3))
    grad = torch.randn(batch, heads, seq, head_dim, device=args.device,
                       dtype=torch.bfloat16, generator=gen)
    import contextlib
    context = contextlib.nullcontext
    if backend:
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError:
            return None
        context = lambda: sdpa_kernel(getattr(SDPBackend, backend))
    cuda = args.device == "cuda"

    def now():
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(a, b):
        if cuda:
            b.synchronize()
            return a.elapsed_time(b)
        return 1000.0 * (b - a)

    fwd, bwd = [], []
    try:
        with context():
            for _ in range(12):
                q.grad = k.grad = v.grad = None
                t0 = now()
                out = F.scaled_dot_product_attention(q, k, v,
                                                     is_causal=causal)
                t1 = now()
                out.backward(grad)
                t2 = now()
                fwd.append(ms(t0, t1))
                bwd.append(ms(t1, t2))
    except RuntimeError:  # no kernel of that backend for these operands
        return None
    return median_after_warmup(fwd), median_after_warmup(bwd)


def attention_side_by_side(args, name, mtc):
    """Prints mtc's fused attention (forward and backward, a step: all
    layers, from --profile) beside PyTorch's scaled_dot_product_attention
    at the same sizes in bf16, with its own choice of kernel and with
    FlashAttention-2 (the backend torch.compile's attention takes)."""
    dims = ATTENTION[name](args.small)
    layers = dims[4]
    sides = ["mtc forward %s ms, backward %s ms" % tuple(
        "%.3f" % v if v is not None else "-"
        for v in (mtc.get("attention_ms"), mtc.get("attention_grad_ms")))]
    for label, backend in (("PyTorch SDPA", None), ("flash", "FLASH_ATTENTION")):
        t = torch_attention_ms(args, dims, backend)
        sides.append("%s forward %s ms, backward %s ms" % (
            label, *(("%.3f" % (layers * v)) if t else "-" for v in
                     (t or (0, 0)))))
    print("  %s: fused attention a step (%d layers of batch %d, %d heads, "
          "sequence %d, head dim %d%s): %s" % (
              name, layers, dims[0], dims[1], dims[2], dims[3],
              ", causal" if dims[5] else "", "; ".join(sides)), flush=True)


def copy_bandwidth(args):
    """GB/s of a device-to-device copy of 1 GiB (read + write), the
    bandwidth the elementwise kernels are measured against."""
    import torch
    n = (2 ** 28) if not args.small else (2 ** 22)
    x = torch.ones(n, device=args.device)
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    if args.device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    reps = 20
    for _ in range(reps):
        y.copy_(x)
    if args.device == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / reps
    return 2 * 4 * n / seconds / 1e9


def prepare_model(args, name):
    """The model's data and ONNX file (exported once); the model, its
    loss and the batch."""
    import torch
    import mtc_testlib as tl
    model, loss_fn, x, y = MODELS[name](args.small)
    work = os.path.join(args.work, name)
    data_dir = os.path.join(work, "data")
    os.makedirs(data_dir, exist_ok=True)
    np.save(os.path.join(data_dir, "input.npy"), x)
    np.save(os.path.join(data_dir, "target.npy"), y)
    onnx_path = os.path.join(work, name + ".onnx")
    if not os.path.exists(onnx_path):
        tl.export_with_loss(model, torch.from_numpy(x), torch.from_numpy(y),
                            onnx_path + ".tmp", loss=loss_fn)
        os.replace(onnx_path + ".tmp", onnx_path)
    return model, loss_fn, x, y, onnx_path, data_dir


def attempt(res, side, fn):
    """res[side] = fn(), or the failure in res["failed"]: one side's
    failure leaves the others' figures."""
    try:
        res[side] = fn()
    except Exception as e:  # noqa: BLE001 (reported, and the exit fails)
        res["failed"].append("%s %s: %s" % (res["name"], side,
                                            str(e).strip()[-800:]))
        print("  FAIL: " + res["failed"][-1], flush=True)


def bench_model(args, name):
    import torch
    model, loss_fn, x, y, onnx_path, data_dir = prepare_model(args, name)
    res = {"name": name, "batch": x.shape[0], "failed": []}
    attempt(res, "mtc", lambda: run_mtc(args, name, onnx_path, data_dir))
    attempt(res, "eager",
            lambda: run_torch(args, model, loss_fn, x, y, compiled=False))
    if hasattr(torch, "compile") and not args.no_compile:
        model, loss_fn, x, y = MODELS[name](args.small)
        attempt(res, "compile",
                lambda: run_torch(args, model, loss_fn, x, y, compiled=True))
    if name in ATTENTION and "mtc" in res:
        try:
            attention_side_by_side(args, name, res["mtc"])
        except Exception as e:  # noqa: BLE001 (a figure apart: reported only)
            print("  %s: fused attention side by side failed: %s" %
                  (name, str(e).strip()[-300:]), flush=True)
    if "mtc" in res and "eager" in res:
        res["loss_gap"] = abs(res["mtc"]["loss"] - res["eager"]["loss"]) / abs(
            res["eager"]["loss"])
        if not res["loss_gap"] <= LOSS_BAR:
            res["failed"].append("%s: first losses differ by more than %g" %
                                 (name, LOSS_BAR))

    def fig(side):
        r = res.get(side)
        return "%s %s" % (side, "%.1f ms (%.0f MiB)" % (
            r["ms"], r["bytes"] / 2 ** 20) if r else "failed")
    print("  %-9s %s, %s%s; first loss %s vs %s" % (
        name, fig("mtc"), fig("eager"),
        ", " + fig("compile") if not args.no_compile else "",
        "%.4f" % res["mtc"]["loss"] if "mtc" in res else "-",
        "%.4f" % res["eager"]["loss"] if "eager" in res else "-"),
        flush=True)
    return res


def table(results, copy_gbs):
    out = ["| model (batch) | mtc ms | eager ms | compile ms | mtc/eager | "
           "mtc/compile | mtc MiB (arena + workspace) | eager MiB | "
           "compile MiB | "
           "first loss mtc / eager | mtc elementwise GB/s (of copy) | "
           "mtc add + layer norm GB/s (of copy) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "mtc" not in r or "eager" not in r:
            out.append("| %s (%d) | %s |" % (r["name"], r["batch"], "; ".join(
                f.replace("|", "/").replace("\n", " ") for f in r["failed"])))
            continue
        c = r.get("compile")
        def of_copy(gbs):
            return ("%.0f (%.0f%%)" % (gbs, 100.0 * gbs / copy_gbs)
                    if gbs is not None else "-")
        out.append("| %s (%d) | %.1f | %.1f | %s | %.2f | %s | %.0f | %.0f | "
                   "%s | %.4f / %.4f | %s | %s |" % (
                       r["name"], r["batch"], r["mtc"]["ms"],
                       r["eager"]["ms"], "%.1f" % c["ms"] if c else "-",
                       r["mtc"]["ms"] / r["eager"]["ms"],
                       "%.2f" % (r["mtc"]["ms"] / c["ms"]) if c else "-",
                       r["mtc"]["bytes"] / 2 ** 20,
                       r["eager"]["bytes"] / 2 ** 20,
                       "%.0f" % (c["bytes"] / 2 ** 20) if c else "-",
                       r["mtc"]["loss"], r["eager"]["loss"],
                       of_copy(r["mtc"]["elementwise_gbs"]),
                       of_copy(r["mtc"]["row_gbs"])))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mtc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default="gpt2s,resnet50")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--device", default="cuda", help="cuda or cpu")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--small", action="store_true",
                    help="toy sizes (a dry run of the script)")
    ap.add_argument("--no-compile", action="store_true",
                    help="skip torch.compile")
    ap.add_argument("--emulated", action="store_true",
                    help="toy sizes, mtc's cuda trainer on the CUDA emulation "
                         "(test/cudaemu), PyTorch on the CPU in bf16: a dry "
                         "run of the GPU path without a GPU")
    ap.add_argument("--doc", help="also write the table here (Markdown)")
    ap.add_argument("--prepare", action="store_true",
                    help="only export the models and build mtc's trainers "
                         "(CPU work, no GPU needed), which a later run with "
                         "the same flags then times: run it beside other "
                         "GPU work")
    args = ap.parse_args()
    args.mtc = os.path.abspath(args.mtc)
    if args.emulated:
        args.device, args.small, args.no_compile = "cpu", True, True
        os.environ["MTC_NVCC"] = os.path.join(ROOT, "test", "cudaemu",
                                              "nvcc-emu")
    os.makedirs(args.work, exist_ok=True)
    if args.prepare:
        for name in args.models.split(","):
            start = time.time()
            onnx_path = prepare_model(args, name)[4]
            exported = time.time() - start
            build_s = compile_mtc(args, name, onnx_path)[1]
            print("prepared %s: exported in %.1fs, trainer built in %.1fs" %
                  (name, exported, build_s), flush=True)
        return 0
    import torch
    print("torch %s, device %s%s" % (
        torch.__version__, args.device,
        " (%s)" % torch.cuda.get_device_name() if args.device == "cuda"
        else " (mtc on the CUDA emulation: no GPU ran)" if args.emulated
        else ""), flush=True)
    copy_gbs = copy_bandwidth(args)
    print("device-to-device copy: %.0f GB/s" % copy_gbs, flush=True)
    results = [bench_model(args, n) for n in args.models.split(",")]
    text = table(results, copy_gbs)
    text += ("\n\nElementwise GB/s: what the generated elementwise and fused "
             "kernels of one step move (operands and results) over their "
             "time (`trainer --profile`), against a %.0f GB/s "
             "device-to-device copy measured in the same run; add + layer "
             "norm GB/s: the same for the fused kernels that end in a "
             "layer norm of their rows (a residual add with its dropout "
             "and 16-bit copies, then the layer norm), which the first "
             "figure leaves out." % copy_gbs)
    print(text)
    failed = [f for r in results for f in r["failed"]]
    for f in failed:
        print("FAIL: " + f)
    if args.doc:
        with open(args.doc, "w") as f:
            f.write("# GPU step time and memory: mtc vs PyTorch\n\n")
            f.write("Made by `/usr/bin/python3 bench/gpu_bench.py --mtc "
                    "build/bin/mtc --work DIR --doc FILE` (torch %s).\n\n"
                    % torch.__version__)
            f.write(__doc__.split("\n\n", 1)[1].split("\nUsage:")[0] + "\n")
            f.write(text + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
