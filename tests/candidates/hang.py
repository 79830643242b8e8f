"""Never returns from forward: verify must stop it at timeout_s."""

import time

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            time.sleep(0.1)
