"""Correct softmax in plain torch, but fails loudly if it can see a secret of the server."""

import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        leaked = [k for k in os.environ if "API_KEY" in k or "TOKEN" in k]
        if leaked:
            raise RuntimeError(f"worker can see {leaked}")
        return torch.softmax(x, dim=-1)
