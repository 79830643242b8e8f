"""Forks until the system says no (bounded at 4000 so a missing limit cannot take the machine
down): the sandbox's process cap must stop it. Children sleep, then leave."""

import os
import time

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        for n in range(4000):
            try:
                pid = os.fork()
            except OSError as e:
                raise RuntimeError(f"fork refused after {n} children: {e}") from None
            if pid == 0:
                time.sleep(60)
                os._exit(0)
        raise RuntimeError("forked 4000 children: no process limit")
