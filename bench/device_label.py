"""The name a result gets for the machine it ran on: bench/results/<benchmark>/<label>.md."""

from __future__ import annotations

import re


def device_label(device: str = "cuda") -> str:
    """'h100', 'h200', 'a100', ... from the GPU's marketing name; 'cpu' when no GPU answers."""
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        name = torch.cuda.get_device_name(device if ":" in device else 0).replace("NVIDIA ", "")
        model = re.search(r"\b[A-Z]+\d+[A-Z]*\b", name)  # H100, A100, L40S; not "80GB"
        return model.group(0).lower() if model else re.sub(r"\W+", "-", name).strip("-").lower()
    return "cpu"
