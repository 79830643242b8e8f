"""Correct softmax, but first reads the server's API key from its environment and sends it out
through its output (the test puts the key in the server's environment as KFORGE_TEST_API_KEY).
The worker's scrubbed environment must not have it: the lookup fails, and the verdict says so."""

import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        key = os.environ["KFORGE_TEST_API_KEY"]
        return torch.softmax(x, dim=-1) + len(key)
