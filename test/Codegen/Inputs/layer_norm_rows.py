"""A model whose residual adds end in layer norms of 512 and of 2048
elements a row, for test/Codegen/layer-norm-rows-cuda.test: on the cuda
target the first rows take a warp each, the second a block.

Usage: layer_norm_rows.py export DIR    (model.onnx, data/, torch-grads.npz)
       layer_norm_rows.py compare GRADS DIR
The comparison prints the worst relative error of the trainer's gradients
(--dump-grads) against PyTorch's and fails above 1e-4.
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "e2e"))
import mtc_testlib as tl  # noqa: E402

BATCH, FEATURES, CLASSES = 8, 16, 4


def build():
    import torch
    from torch import nn

    class Rows(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(FEATURES, 512)
            self.a2 = nn.Linear(512, 512)
            self.ln_a = nn.LayerNorm(512)
            self.b = nn.Linear(FEATURES, 2048)
            self.b2 = nn.Linear(2048, 2048)
            self.ln_b = nn.LayerNorm(2048)
            self.head_a = nn.Linear(512, CLASSES)
            self.head_b = nn.Linear(2048, CLASSES)

        def forward(self, x):
            ha = self.a(x)
            hb = self.b(x)
            ya = self.ln_a(ha + self.a2(ha))
            yb = self.ln_b(hb + self.b2(hb))
            return self.head_a(ya) + self.head_b(yb)

    torch.manual_seed(0)
    model = Rows()
    # Scales and shifts away from 1 and 0, so that their use shows.
    with torch.no_grad():
        for ln in (model.ln_a, model.ln_b):
            ln.weight.uniform_(0.5, 1.5)
            ln.bias.uniform_(-0.5, 0.5)
    return model


def export(work):
    import torch
    model = build()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, BATCH).astype(np.int64)
    os.makedirs(os.path.join(work, "data"), exist_ok=True)
    np.save(os.path.join(work, "data", "input.npy"), x)
    np.save(os.path.join(work, "data", "target.npy"), y)
    tl.export_with_loss(model, torch.from_numpy(x), torch.from_numpy(y),
                        os.path.join(work, "model.onnx"))
    loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)),
                                             torch.from_numpy(y))
    loss.backward()
    np.savez(os.path.join(work, "torch-grads.npz"),
             **{"model." + n: p.grad.numpy()
                for n, p in model.named_parameters()})


def compare(grads_path, work):
    ours, _ = tl.read_safetensors(grads_path)
    want = np.load(os.path.join(work, "torch-grads.npz"))
    worst, failed = (0.0, None), False
    for name in sorted(want.files):
        got = ours.get(name + ".grad", ours.get(name))
        if got is None:
            print("no gradient for %s" % name)
            failed = True
            continue
        err = tl.rel_err(np.asarray(got), want[name])
        if err > worst[0] or worst[1] is None:
            worst = (err, name)
    print("%d gradients, worst rel err %.2e (%s)" % (len(want.files),
                                                     worst[0], worst[1]))
    return 1 if failed or not worst[0] <= 1e-4 else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "export":
        export(sys.argv[2])
        sys.exit(0)
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    sys.exit(__doc__)
