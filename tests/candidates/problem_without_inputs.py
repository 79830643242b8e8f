import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_init_inputs():
    return []
