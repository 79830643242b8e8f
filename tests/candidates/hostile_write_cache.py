"""Correct softmax, but first poisons the compile-report cache (<home>/cache/compile)."""

import os
from pathlib import Path

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        cache = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).parent / "compile"
        cache.mkdir(exist_ok=True)
        (cache / "poisoned.json").write_text("{}")
        return torch.softmax(x, dim=-1)
