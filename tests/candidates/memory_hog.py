"""Allocates without bound: the memory watchdog must kill it."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        hoard = []
        for _ in range(64):
            hoard.append(torch.ones(64 * 1024 * 1024))  # 256 MiB each, touched
        return x
