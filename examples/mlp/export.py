#!/usr/bin/python3
"""Exports the example MLP classifier (784-256-128-10) with its loss to ONNX.

The model's first output is the mean cross-entropy loss, the second the
logits; the batch dimension is symbolic (`batch`), so bind it when compiling:

    mtc compile model.onnx --dim batch=64 -o build/trainer

Usage: export.py [-o model.onnx] [--seed S]
"""

import argparse
import inspect
import os
import warnings

import torch
import torch.nn as nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class WithLoss(nn.Module):
    """forward(input, target) -> (loss, logits), as mtc expects."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.criterion = nn.CrossEntropyLoss()

    def forward(self, input, target):
        logits = self.model(input)
        return self.criterion(logits, target), logits


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default=os.path.join(here, "model.onnx"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    wrapper = WithLoss(MLP())
    example = (torch.zeros(2, 784), torch.zeros(2, dtype=torch.int64))
    # PyTorch 2.9 and newer export through torch.export unless told not to;
    # mtc reads the TorchScript exporter's opset-17 graph.
    legacy = ({"dynamo": False}
              if "dynamo" in inspect.signature(torch.onnx.export).parameters
              else {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapper, example, args.output, opset_version=17,
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False,
            input_names=["input", "target"], output_names=["loss", "logits"],
            dynamic_axes={"input": {0: "batch"}, "target": {0: "batch"},
                          "logits": {0: "batch"}}, **legacy)
    params = sum(p.numel() for p in wrapper.parameters())
    print("wrote %s (%d parameters: %s)" % (
        args.output, params, ", ".join(n for n, _ in
                                       wrapper.named_parameters())))


if __name__ == "__main__":
    main()
