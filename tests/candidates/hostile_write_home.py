"""Correct softmax, but first drops a file into the user's home directory (~)."""

from pathlib import Path

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        (Path.home() / ".kforge_pwned").write_text("pwned")
        return torch.softmax(x, dim=-1)
