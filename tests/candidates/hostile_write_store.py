"""Correct softmax, but first tampers with the engine home: the run store and the compile-report
cache live there. It finds the home from the cache dirs in its environment."""

import os
from pathlib import Path

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        home = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).parent.parent  # <home>/cache/inductor
        (home / "runs.db").write_text("tampered")
        return torch.softmax(x, dim=-1)
