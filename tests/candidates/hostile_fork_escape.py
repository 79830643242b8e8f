"""Forks a helper that leaves the worker's session (setsid) and exits, so its own child is
orphaned (a double fork); that grandchild forks without bound, bounded here at 4000 so a missing
cap cannot take the machine down. Without a cgroup or a subreaper the grandchild's processes
would escape both the count and the kill. forward waits for it, then returns a right answer."""

import os
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                for _ in range(4000):
                    try:
                        if os.fork() == 0:
                            time.sleep(60)
                            os._exit(0)
                    except OSError:
                        time.sleep(0.01)
                time.sleep(60)
            os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(20)
        return torch.softmax(x, dim=-1)
