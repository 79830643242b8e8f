import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        rows = x.shape[0]
        raise ValueError(f"cannot handle {rows} rows")  # line 7
