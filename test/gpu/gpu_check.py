"""The GPU check: on a machine with a CUDA GPU, build the cuda trainers of
the end-to-end tests, run them, and compare them with PyTorch and with the
CPU trainers built from the same models.

Usage: gpu_check.py --mtc BUILD/bin/mtc --work DIR [--build BUILD]

Steps, each printed with its figures:
  1. the runtime's CUDA kernel unit tests (mtc-runtime-cuda-tests);
  2. for the MLP and the CNN (check_model.py) and the zoo (check_zoo.py:
     ResNet-18, MobileNetV2, TransformerEncoder, GPT, ViT), the end-to-end
     checks on the cpu and on the cuda target (gradients after one step,
     20-step SGD / AdamW trajectories, BatchNorm statistics, against
     PyTorch);
  3. cuda vs cpu: every step's loss and every saved tensor after 20 steps,
     relative error <= 1e-4 (for the zoo, or within 30x PyTorch's own
     rounding error of that tensor, check_zoo.py's rule against PyTorch;
     the CNNs' tensors are reported, as check_zoo.py reports them);
  4. 16-bit storage: the MLP with activations rounded through bf16 / fp16
     (mtc.convert) on both targets, and --precision bf16 / fp16 on the cuda
     target (check_precision.py: gradients against torch.autocast, loss
     trajectories against fp32);
  5. fp16 dynamic loss scaling on the cuda target (check_loss_scaling.py:
     gradients against PyTorch's float16 step, skipped steps and resumed
     runs bitwise, an injected overflow skipped);
  6. fused attention on the cuda target (check_flash_attention.py:
     gradients and losses against PyTorch, dropout against the unfused
     ops with the same seed);
  7. CUDA graphs (check_cuda_graphs.py): the step replayed as a graph gives
     bitwise the losses and checkpoint of eager launches (dropout, AdamW
     with accumulation, SGD momentum), and the capture succeeded.
The checks run --jobs at a time (default: one per CPU core), a model's two
targets side by side and the precision check in one part per model. Exit status 0 only when everything passes.
"""

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import mtc_testlib as lib  # noqa: E402

TOL = 1e-4


def run(cmd, log):
    start = time.time()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(log, "w") as f:
        f.write(proc.stdout)
    return proc.returncode, time.time() - start, proc.stdout


def run_or_fail(cmd, log):
    """run(), with a command that cannot start (a missing interpreter or
    binary) as a failed run whose output says why."""
    try:
        return run(cmd, log)
    except OSError as e:
        return 1, 0.0, f"cannot run {cmd[0]}: {e}"


def compare_checkpoints(got, want, noise_path):
    """The device trainer's checkpoint against the cpu trainer's: every
    tensor within TOL relative, or, where check_zoo.py measured it
    (torch-noise.json), within its factor of PyTorch's own float32 rounding
    error for that tensor after the same steps, the rule each checkpoint met
    against PyTorch. Where check_zoo only reports the tensors (models with
    kinks) this reports them too. Returns (ok, detail)."""
    noise = {"required": True, "factor": 0.0, "noise": {}}
    if os.path.exists(noise_path):
        with open(noise_path) as f:
            noise = json.load(f)
    bad, worst, on_noise = [], (0.0, None), 0
    for name in sorted(want):
        rel = lib.rel_err(got[name], want[name]) if name in got else float("inf")
        ref = float(np.linalg.norm(np.asarray(want[name], np.float64).ravel()))
        allowed = max(TOL, noise["factor"] * noise["noise"].get(name, 0.0) / max(ref, 1e-30))
        if not rel <= allowed:
            bad.append(f"{name} {rel:.2e}")
        elif rel > TOL:
            on_noise += 1
        if worst[1] is None or not rel <= worst[0]:
            worst = (rel, name)
    detail = f"worst saved tensor rel err {worst[0]:.2e} ({worst[1]})"
    if on_noise:
        detail += f", {on_noise} over {TOL:g} but within {noise['factor']:g}x PyTorch's own rounding error"
    if bad:
        detail += f"; {len(bad)} over: " + ", ".join(bad[:4]) + (" ..." if len(bad) > 4 else "")
    if not noise["required"]:
        detail += " (tensors reported only, as check_zoo.py does for this model)"
        return set(got) == set(want), detail
    return set(got) == set(want) and not bad, detail


def default_jobs():
    """One check at a time per CPU core: the checks are processes (trainer
    builds, CPU trainers, PyTorch), and the GPU's share of them is small."""
    return max(1, os.cpu_count() or 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mtc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--build", default=None, help="build directory (for the CUDA unit tests)")
    ap.add_argument("--device-target", default="cuda",
                    help="target compared with cpu (cpu here dry-runs the script on a machine without a GPU)")
    ap.add_argument("--emulated", action="store_true",
                    help="the cuda target on the CUDA emulation (test/cudaemu): trainers built by "
                         "its nvcc-emu, the kernel tests from mtc-runtime-cudaemu-tests; no GPU needed")
    ap.add_argument("--models", default=None,
                    help="comma-separated subset of the models (default: all)")
    ap.add_argument("--no-kernel-tests", action="store_true",
                    help="skip step 1, the runtime's CUDA kernel tests (a run "
                         "split in parts runs them in one)")
    ap.add_argument("--jobs", type=int, default=default_jobs(),
                    help="checks run at once (default: the CPU cores, %(default)s here); "
                         "each child then gets cores / jobs threads (OMP_NUM_THREADS, "
                         "OPENBLAS_NUM_THREADS) unless those are set")
    args = ap.parse_args()
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    os.makedirs(args.work, exist_ok=True)
    if args.jobs > 1:
        threads = str(max(1, (os.cpu_count() or 1) // args.jobs))
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ.setdefault(var, threads)
    build = args.build or os.path.dirname(os.path.dirname(os.path.abspath(args.mtc)))
    notes = []  # lines printed after the table
    start = time.time()
    # A check is a group of jobs (one, or parts that can run side by side):
    # its parts' outputs, in order, go to its combine(), which returns its
    # results, (name, ok, detail) each. Up to --jobs jobs run at once.
    checks = []  # {"parts": [callable], "combine": callable}

    def add_check(parts, combine=lambda outputs: outputs[0]):
        checks.append({"parts": list(parts), "combine": combine})

    unit_name = "mtc-runtime-cudaemu-tests" if args.emulated else "mtc-runtime-cuda-tests"
    if args.emulated:
        os.environ["MTC_NVCC"] = os.path.join(HERE, "..", "cudaemu", "nvcc-emu")
    unit = os.path.join(build, "bin", unit_name)
    if not os.path.exists(unit):
        unit = os.path.join(build, "test", "unit", "runtime", unit_name)
    if args.no_kernel_tests:
        notes.append("runtime CUDA kernel tests not run (--no-kernel-tests)")
    elif os.path.exists(unit):
        def kernel_tests():
            rc, secs, out = run([unit], os.path.join(args.work, "cuda-unit.log"))
            tail = [l for l in out.splitlines() if "PASSED" in l or "FAILED" in l]
            ran = re.search(r"PASSED\s*\]\s*[1-9][0-9]* test", out) is not None
            # Which bias-gradient GEMMs ran as cuBLASLt epilogues (the tests
            # print it; a fallback is correct, only slower).
            notes.extend(l for l in out.splitlines()
                         if l.startswith("gemm") and "BGRAD" in l)
            return [("runtime CUDA kernel tests", rc == 0 and ran,
                     "; ".join(tail[-2:]) + f" ({secs:.1f}s)")]
        add_check([kernel_tests])
    else:
        add_check([lambda: [("runtime CUDA kernel tests", False, unit_name + " not built")]])
    # On a GPU: the emulation's promises that CUDA defines (the built-ins,
    # barriers, shuffles, WMMA, mma.sync and ldmatrix fragments through the
    # runtime's inline PTX, graphs), built by nvcc, so that the layouts the
    # emulated kernels were tested with are checked against the hardware.
    layouts = os.path.join(build, "bin", "mtc-cudaemu-self-tests-gpu")
    if not args.emulated and args.device_target == "cuda" and not args.no_kernel_tests:
        if os.path.exists(layouts):
            def layout_tests():
                rc, secs, out = run([layouts, "--gtest_filter=" + ":".join(
                    "CudaEmulation." + t for t in [
                        "BuiltInVariablesCoverTheGrid", "SyncthreadsOrdersSharedMemory",
                        "BarrierReductions", "WarpShufflesFollowCudasWidthRules",
                        "WmmaMultipliesTiles", "GraphsRecordAndReplay",
                        "AsyncCopiesFromTheHostTakeTheBytesAtOnce",
                        "MmaFragmentsFollowThePtxLayout", "LdmatrixFollowsThePtxLayout"])],
                    os.path.join(args.work, "emulation-layouts.log"))
                ran = re.search(r"PASSED\s*\]\s*[1-9][0-9]* test", out) is not None
                tail = [l for l in out.splitlines() if "PASSED" in l or "FAILED" in l]
                return [("the emulation's CUDA layouts on the GPU", rc == 0 and ran,
                         "; ".join(tail[-3:]) + f" ({secs:.1f}s)")]
            add_check([layout_tests])
        else:
            notes.append("mtc-cudaemu-self-tests-gpu not built: the emulation's "
                         "layouts were not checked on the GPU")

    e2e = os.path.join(HERE, "..", "e2e", "check_model.py")
    zoo = os.path.join(HERE, "..", "zoo", "check_zoo.py")
    models = [("mlp", e2e), ("cnn", e2e), ("mlp-bf16", e2e), ("mlp-fp16", e2e)] + [
        (m, zoo) for m in ["resnet18", "mobilenetv2", "transformer", "gpt", "vit"]]
    if args.models:
        keep = args.models.split(",")
        models = [(m, c) for m, c in models if m in keep]
    # The 16-bit MLPs run the configurations their e2e test runs (see
    # test/e2e/mlp-low-precision.test for why SGD-Nesterov is left out).
    extra = {"mlp-bf16": ["--configs", "sgd,adamw"], "mlp-fp16": ["--configs", "sgd,adamw"]}

    def model_check(model, check):
        """The model on both targets against PyTorch (two parts), then the
        two targets' trainers against each other."""
        dirs = {}
        for target in ["cpu", args.device_target]:
            work = os.path.join(args.work, f"{model}-{target}" + ("-again" if target in dirs else ""))
            dirs.setdefault(target, work)
            if target in dirs and dirs[target] != work:  # dry run: cpu twice
                dirs[target + "-again"] = work

        def against_pytorch(target, work):
            rc, secs, out = run_or_fail([sys.executable, check, "--model", model, "--mtc", args.mtc,
                                         "--work", work, "--target", target] + extra.get(model, []),
                                        work + ".log")
            worst = [l.strip() for l in out.splitlines() if l.strip().startswith("worst")]
            return (f"{model} {target} vs PyTorch", rc == 0, "; ".join(worst) + f" ({secs:.1f}s)")

        def combine(outputs):
            results = list(outputs)
            # cuda vs cpu on the same model, data and flags.
            for config in ["sgd", "sgd-nesterov", "adamw"]:
                if not os.path.exists(os.path.join(dirs["cpu"], config, "metrics.jsonl")):
                    continue  # not a configuration of this model's check
                try:
                    cpu_loss = lib.read_losses(os.path.join(dirs["cpu"], config, "metrics.jsonl"))
                    second = dirs.get(args.device_target + "-again", dirs[args.device_target])
                    gpu_loss = lib.read_losses(os.path.join(second, config, "metrics.jsonl"))
                    loss_err = max(lib.rel_err(g, c) for g, c in zip(gpu_loss, cpu_loss))
                    ok = len(cpu_loss) == len(gpu_loss) and loss_err <= TOL
                    detail = f"{len(gpu_loss)} steps, worst loss rel err {loss_err:.2e}"
                    final_cpu = os.path.join(dirs["cpu"], config, "final.safetensors")
                    final_gpu = os.path.join(second, config, "final.safetensors")
                    if os.path.exists(final_cpu) and os.path.exists(final_gpu):
                        a, _ = lib.read_safetensors(final_gpu)
                        b, _ = lib.read_safetensors(final_cpu)
                        tensors_ok, tensor_detail = compare_checkpoints(
                            a, b, os.path.join(dirs["cpu"], config, "torch-noise.json"))
                        ok = ok and tensors_ok
                        detail += ", " + tensor_detail
                    results.append((f"{model} {config} cuda vs cpu", ok, detail))
                except Exception as e:  # a missing file means the run failed above
                    results.append((f"{model} {config} cuda vs cpu", False, f"not comparable: {e}"))
            return results

        second = dirs.get(args.device_target + "-again", dirs[args.device_target])
        add_check([lambda: against_pytorch("cpu", dirs["cpu"]),
                   lambda: against_pytorch(args.device_target, second)], combine)

    for model, check in models:
        model_check(model, check)

    def e2e_script(key, script, label, summary, parts=None):
        """Runs test/e2e/<script> on the device target as one check, in
        parts (a work folder and extra arguments each) run as jobs of their
        own: the check passes when every part does, its figures are theirs
        in order and its time the longest part's."""
        if args.models and key not in args.models.split(","):
            return
        parts = parts or [(key, [])]

        def part(name, extra_args):
            return run_or_fail([sys.executable,
                        os.path.join(HERE, "..", "e2e", script),
                        "--mtc", args.mtc,
                        "--work", os.path.join(args.work, name),
                        "--target", args.device_target] + extra_args,
                       os.path.join(args.work, name + ".log"))

        def combine(outputs):
            rc = max(abs(o[0]) for o in outputs)
            secs = max(o[1] for o in outputs)
            lines = [l for o in outputs for l in o[2].splitlines()]
            return [(f"{label} on {args.device_target}", rc == 0,
                     "; ".join(summary(lines)) + f" ({secs:.1f}s)")]

        add_check([lambda name=name, extra_args=extra_args: part(name, extra_args)
                   for name, extra_args in parts], combine)

    # --precision's models (check_precision.py's defaults) one part each.
    precision_parts = [("precision-" + m, ["--models", m, "--trajectory-models", ""])
                       for m in ["mlp", "cnn", "transformer", "gpt", "gpt-tanh"]]
    precision_parts.append(("precision-vit", ["--models", "", "--trajectory-models", "vit"]))
    e2e_script("precision", "check_precision.py", "--precision bf16/fp16",
               lambda lines: [l.strip() for l in lines if "worst" in l],
               parts=precision_parts)
    e2e_script("loss-scaling", "check_loss_scaling.py", "fp16 loss scaling",
               lambda lines: [l.split(":")[0] + ": " +
                              ("ok" if "FAIL" not in l else l)
                              for l in lines
                              if l and not l.startswith("SUMMARY")])
    e2e_script("flash-attention", "check_flash_attention.py",
               "fused attention",
               lambda lines: [l.strip()[7:] for l in lines
                              if "rel err" in l or "peak" in l])
    e2e_script("cuda-graphs", "check_cuda_graphs.py", "CUDA graphs",
               lambda lines: [l.strip() for l in lines
                              if l.strip().startswith("[")])

    # Results are printed as each check finishes (so that a run cut short,
    # a device call's time limit, still shows what finished) and then in
    # the order above.
    jobs = [(c, p) for c in range(len(checks)) for p in range(len(checks[c]["parts"]))]
    print(f"gpu-check: {len(checks)} checks in {len(jobs)} jobs, "
          f"{min(args.jobs, max(len(jobs), 1))} at a time", flush=True)
    outputs = [{} for _ in checks]
    finished = {}  # check index -> results
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(checks[c]["parts"][p]): (c, p) for c, p in jobs}
        for future in concurrent.futures.as_completed(futures):
            c, p = futures[future]
            outputs[c][p] = future.result()
            if len(outputs[c]) < len(checks[c]["parts"]):
                continue
            finished[c] = checks[c]["combine"]([outputs[c][i] for i in sorted(outputs[c])])
            for name, ok, detail in finished[c]:
                print(f"  [{time.time() - start:5.0f}s] {'PASS' if ok else 'FAIL'}  {name}  {detail}",
                      flush=True)
    results = [r for c in sorted(finished) for r in finished[c]]

    print("\nmtc GPU check" + (" (on the CUDA emulation: no GPU ran)" if args.emulated else ""))
    width = max(len(n) for n, _, _ in results)
    for name, ok, detail in results:
        print(f"  {'PASS' if ok else 'FAIL'}  {name:<{width}}  {detail}")
    failed = sum(1 for _, ok, _ in results if not ok)
    print(f"{len(results) - failed} passed, {failed} failed  ({time.time() - start:.0f}s)")
    for line in notes:
        print("  note: " + line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
