"""The PyTorch op instead of a kernel: the torch functions a forward calls, against those a ModelNew may call
around its kernels."""

from __future__ import annotations

from kforge_mcp.core.schemas import Finding

# torch functions a ModelNew may call around its kernels: allocation, shape and layout.
ALLOWED_TORCH_OPS = {
    "empty",
    "empty_like",
    "empty_strided",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "full_like",
    "arange",
    "tensor",
    "as_tensor",
    "contiguous",
    "view",
    "view_as",
    "reshape",
    "reshape_as",
    "flatten",
    "unflatten",
    "squeeze",
    "unsqueeze",
    "permute",
    "transpose",
    "t",
    "expand",
    "expand_as",
    "narrow",
    "select",
    "__getitem__",
    "size",
    "stride",
    "dim",
    "numel",
    "is_contiguous",
    "data_ptr",
    "__dlpack__",  # a zero-copy export (how CuTe DSL, CuPy and JAX take a torch tensor), not compute
    "__dlpack_device__",
    "element_size",
    "storage_offset",
    "to",
    "cuda",
    "cpu",
    "type",
    "float",
    "half",
    "bfloat16",
    "new_empty",
    "new_zeros",
    "new_ones",
    "new_full",
    "split",
    "chunk",
    "unbind",
    "__len__",
    "__iter__",
    "__hash__",
    "__eq__",
    "__format__",
    "__repr__",
    "get_device",
    "is_floating_point",
    "requires_grad_",
    "detach",
    "__setstate__",
    "__reduce_ex__",
    "shape",
    "dtype",
    "device",
    "is_cuda",
    "data",
    "grad",
    "requires_grad",
    "T",
    "mT",
    "layout",
    "ndim",
    "__get__",
    "_is_view",
    "untyped_storage",
    "storage",
    "copy_",
    "zero_",
    "fill_",
    "__bool__",
    "item",
    "tolist",
}


# Ops that do the heavy work of the problems we judge: calling one instead of a kernel is a cheat.
HEAVY_TORCH_OPS = {
    "matmul",
    "mm",
    "bmm",
    "addmm",
    "baddbmm",
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "softmax",
    "log_softmax",
    "layer_norm",
    "group_norm",
    "batch_norm",
    "instance_norm",
    "rms_norm",
    "scaled_dot_product_attention",
    "einsum",
    "tensordot",
    "gelu",
    "silu",
    "relu",
    "sigmoid",
    "tanh",
    "exp",
    "sum",
    "mean",
    "max",
    "min",
    "amax",
    "cumsum",
    "sort",
    "topk",
    "__matmul__",
    "cross_entropy",
    "nll_loss",
    "mse_loss",
    "embedding",
    "avg_pool2d",
    "max_pool2d",
    "interpolate",
}


class TorchOpRecorder:
    """Records the torch functions a forward calls, through __torch_function__."""

    def __init__(self):
        from torch.overrides import TorchFunctionMode

        recorder = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = getattr(func, "__name__", None) or str(func)
                recorder.calls[name] = recorder.calls.get(name, 0) + 1
                return func(*args, **(kwargs or {}))

        self.calls: dict[str, int] = {}
        self._mode = Mode()

    def __enter__(self):
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)

    def compute_ops(self) -> dict[str, int]:
        return {
            k: v for k, v in self.calls.items() if k.strip("_") not in ALLOWED_TORCH_OPS and k not in ALLOWED_TORCH_OPS
        }


def torch_op_findings(recorder: TorchOpRecorder, launches: int | None) -> list[Finding]:
    findings = []
    compute = recorder.compute_ops()
    heavy = sorted(k for k in compute if k.strip("_").removesuffix("_") in HEAVY_TORCH_OPS)
    if launches == 0:
        findings.append(
            Finding(
                code="no_kernel_launched",
                severity="suspicious",
                evidence={"launches": 0, "torch_ops": compute},
                message="ModelNew.forward launched none of the candidate's own kernels",
            )
        )
    if heavy:
        findings.append(
            Finding(
                code="torch_op_instead_of_kernel",
                severity="suspicious",
                evidence={"torch_ops": {k: compute[k] for k in heavy}},
                message=f"ModelNew.forward calls PyTorch compute ops: {', '.join(heavy)}",
            )
        )
    elif compute:
        findings.append(
            Finding(
                code="torch_compute_in_forward",
                severity="warning",
                evidence={"torch_ops": compute},
                message=f"ModelNew.forward also computes with PyTorch: {', '.join(sorted(compute))}",
            )
        )
    return findings
