"""PyTorch's accuracy of the test classifier (Flatten, Gemm, Relu, Gemm) over
the full batches of 4 in DIR, ignoring labels equal to -100; printed as the
trainer prints it.

Usage: torch_eval.py MODEL.onnx DIR
"""

import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

w = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy())
     for t in onnx.load(sys.argv[1]).graph.initializer}
x = torch.from_numpy(np.load(sys.argv[2] + "/input.npy"))
t = torch.from_numpy(np.load(sys.argv[2] + "/target.npy"))
batches = len(x) // 4
x, t = x[:batches * 4], t[:batches * 4]
h = torch.relu(torch.nn.functional.linear(x.flatten(1), w["fc1.weight"], w["fc1.bias"]))
logits = torch.nn.functional.linear(h, w["fc2.weight"], w["fc2.bias"])
valid = t != -100
correct = int((logits.argmax(1)[valid] == t[valid]).sum())
counted = int(valid.sum())
print("eval accuracy %.4f (%d of %d)" % (correct / counted, correct, counted))
