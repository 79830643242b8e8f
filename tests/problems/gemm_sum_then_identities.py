"""A Linear, a sum over its features, then max, mean and two logsumexps over the dim of size 1 the sum
left: the sum folds into a GEMV and the rest are identities."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = torch.sum(x, dim=1, keepdim=True)
        x = torch.max(x, dim=1, keepdim=True)[0]
        x = torch.mean(x, dim=1, keepdim=True)
        x = torch.logsumexp(x, dim=1, keepdim=True)
        return torch.logsumexp(x, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64, 96]
