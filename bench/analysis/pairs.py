"""Before/after kernel pairs for calibrating the analysis rules' expected gains.

Each pair is a Triton kernel ("before"), the change one rule's advice asks for ("after", the same
computation), and the rule it follows. ``pair_capture.py`` times both on a GPU with kforge's verify
timing and profiles the before kernel with Nsight Compute; ``bench/advice_calibration.py`` runs the
agent on each before profile and sets its expected gain against the realized one.

Some pairs are built to show where a rule's model fails: folding a memory-bound split kernel into a
busy GEMM, coalescing a kernel whose DRAM traffic is already minimal, feeding a tensor pipe that
idles for latency. Their realized gain is about zero or negative; a rule that holds must not
promise much there.

``build(name, device, tiny)`` returns ``(before, after, check, meta)``: ``before()`` and ``after()``
launch the kernels once; ``check()`` runs both and compares each with a torch reference;
``meta`` has the problem's FLOPs and minimum bytes, dtype and tolerance (for the roofline).
``tiny=True`` shrinks every shape so the pairs run under TRITON_INTERPRET=1 on a CPU.

Imports only torch, triton and the standard library (the capture runs on a bare GPU machine).
"""

from __future__ import annotations

import triton
import triton.language as tl

FP32_TOL = 1e-4
BF16_TOL = 1e-2


# ---------------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------------


@triton.jit
def pair_marker_kernel(p, i):
    # launched before each pair's before kernel in the ncu run: its rows split the raw page per pair
    tl.store(p, i)


@triton.jit
def ew_mul_kernel(x, y, n, s, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.store(y + o, tl.load(x + o, mask=m) * s, mask=m)


@triton.jit
def ew_add_kernel(x, y, n, s, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.store(y + o, tl.load(x + o, mask=m) + s, mask=m)


@triton.jit
def ew_relu_kernel(x, y, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.store(y + o, tl.maximum(tl.load(x + o, mask=m), 0.0), mask=m)


@triton.jit
def ew_fused_kernel(x, y, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.store(y + o, tl.maximum(tl.load(x + o, mask=m) * 2.0 + 1.0, 0.0), mask=m)


@triton.jit
def ew_persistent_kernel(x, y, n, BLOCK: tl.constexpr):
    # a fixed grid walking the array: with fewer programs than SMs the others idle
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        o = start + tl.arange(0, BLOCK)
        m = o < n
        tl.store(y + o, tl.maximum(tl.load(x + o, mask=m) * 2.0 + 1.0, 0.0), mask=m)


@triton.jit
def add_kernel(a, b, y, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.store(y + o, tl.load(a + o, mask=m) + tl.load(b + o, mask=m), mask=m)


@triton.jit
def pair_sum_strided_kernel(x, y, n, BLOCK: tl.constexpr):
    # y[i] = x[2i] + x[2i+1] as two stride-2 loads: half of each sector is unused by each load
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.store(y + o, tl.load(x + 2 * o, mask=m) + tl.load(x + 2 * o + 1, mask=m), mask=m)


@triton.jit
def pair_sum_contig_kernel(x, y, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    o2 = tl.program_id(0) * 2 * BLOCK + tl.arange(0, 2 * BLOCK)
    v = tl.load(x + o2, mask=o2 < 2 * n)
    a, b = tl.split(tl.reshape(v, (BLOCK, 2)))
    tl.store(y + o, a + b, mask=o < n)


@triton.jit
def scale2d_kernel(x, y, M, N, s, ALONG_ROWS: tl.constexpr, BLOCK: tl.constexpr):
    # ALONG_ROWS: a program's lanes walk down a column (stride N): every lane its own sector
    pid = tl.program_id(0)
    if ALONG_ROWS:
        col = pid % N
        rows = (pid // N) * BLOCK + tl.arange(0, BLOCK)
        o = rows * N + col
        m = rows < M
    else:
        o = pid * BLOCK + tl.arange(0, BLOCK)
        m = o < M * N
    tl.store(y + o, tl.load(x + o, mask=m) * s, mask=m)


@triton.jit
def transpose_rows_kernel(x, y, M, N, BLOCK: tl.constexpr):
    # a program reads BLOCK of one row of x (coalesced) and writes them down a column of y
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < N
    tl.store(y + cols * M + row, tl.load(x + row * N + cols, mask=m), mask=m)


@triton.jit
def transpose_tile_kernel(x, y, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    m = (rm[:, None] < M) & (rn[None, :] < N)
    t = tl.load(x + rm[:, None] * N + rn[None, :], mask=m)
    mt = (rn[:, None] < N) & (rm[None, :] < M)
    tl.store(y + rn[:, None] * M + rm[None, :], tl.trans(t), mask=mt)


@triton.jit
def softmax_chunked_kernel(x_ptr, y_ptr, ROWS, N, stride, BLOCK: tl.constexpr):
    # programs walk their rows in BLOCK chunks, three passes, a reduction after every load
    offs = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), ROWS, tl.num_programs(0)):
        x_row = x_ptr + row * stride
        y_row = y_ptr + row * stride
        m = tl.full((), float("-inf"), tl.float32)
        for start in range(0, N, BLOCK):
            m = tl.maximum(m, tl.max(tl.load(x_row + start + offs), axis=0))
        s = tl.zeros((), tl.float32)
        for start in range(0, N, BLOCK):
            s += tl.sum(tl.exp(tl.load(x_row + start + offs) - m), axis=0)
        for start in range(0, N, BLOCK):
            v = tl.load(x_row + start + offs)
            tl.store(y_row + start + offs, tl.exp(v - m) / s)


@triton.jit
def softmax_row_kernel(x_ptr, y_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * stride + offs, mask=offs < N, other=float("-inf"))
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(y_ptr + row * stride + offs, e / tl.sum(e, axis=0), mask=offs < N)


@triton.jit
def row_max_kernel(x_ptr, m_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    tl.store(m_ptr + row, tl.max(tl.load(x_ptr + row * stride + offs, mask=offs < N, other=float("-inf")), axis=0))


@triton.jit
def row_sumexp_kernel(x_ptr, m_ptr, s_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * stride + offs, mask=offs < N, other=float("-inf"))
    tl.store(s_ptr + row, tl.sum(tl.exp(v - tl.load(m_ptr + row)), axis=0))


@triton.jit
def softmax_scale_kernel(x_ptr, m_ptr, s_ptr, y_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * stride + offs, mask=offs < N)
    tl.store(y_ptr + row * stride + offs, tl.exp(v - tl.load(m_ptr + row)) / tl.load(s_ptr + row), mask=offs < N)


@triton.jit
def layernorm_row_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(x_ptr + row * stride + offs, mask=m, other=0.0)
    mean = tl.sum(x, axis=0) / N
    xc = tl.where(m, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / N + eps)
    w = tl.load(w_ptr + offs, mask=m)
    b = tl.load(b_ptr + offs, mask=m)
    tl.store(y_ptr + row * stride + offs, xc * rstd * w + b, mask=m)


@triton.jit
def row_sum_loop_kernel(x_ptr, y_ptr, N, stride, BLOCK: tl.constexpr):
    # one program per row, looping over the row: as many programs as rows
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, N, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + offs, mask=offs < N, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def row_sum_split_kernel(x_ptr, y_ptr, N, stride, CHUNK, BLOCK: tl.constexpr):
    # a 2D grid: rows x chunks of each row, partial sums added atomically (one atomic per program)
    row = tl.program_id(0)
    lo = tl.program_id(1) * CHUNK
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(lo, lo + CHUNK, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + offs, mask=offs < N, other=0.0)
    tl.atomic_add(y_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def bins_atomic_kernel(x, out, n, BINS: tl.constexpr, BLOCK: tl.constexpr):
    # every element adds itself into one of BINS floats: the atomics serialize in L2
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.atomic_add(out + o % BINS, tl.load(x + o, mask=m, other=0.0), mask=m)


@triton.jit
def bins_block_kernel(x, out, n, BINS: tl.constexpr, BLOCK: tl.constexpr):
    # reduce the block per bin first, then one atomic per bin per program
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + o, mask=o < n, other=0.0)
    part = tl.sum(tl.reshape(v, (BLOCK // BINS, BINS)), axis=0)
    tl.atomic_add(out + tl.arange(0, BINS), part)


@triton.jit
def gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    bias_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
    EPILOGUE: tl.constexpr,
):
    # row-major A (M x K), B (K x N), C (M x N); EPILOGUE 1: C = relu(A @ B + bias)
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BLOCK_N)
    group = 8 * num_n
    first_m = (pid // group) * 8
    gm = min(tl.cdiv(M, BLOCK_M) - first_m, 8)
    pid_m = first_m + ((pid % group) % gm)
    pid_n = (pid % group) // gm
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    if EPILOGUE == 1:
        acc = tl.maximum(acc + tl.load(bias_ptr + rn)[None, :], 0.0)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty))


@triton.jit
def bias_relu_kernel(c_ptr, bias_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    v = tl.load(c_ptr + row * N + offs).to(tl.float32) + tl.load(bias_ptr + offs)
    tl.store(y_ptr + row * N + offs, tl.maximum(v, 0.0).to(y_ptr.dtype.element_ty))


@triton.jit
def split_bf16_kernel(x, hi, lo, n, BLOCK: tl.constexpr):
    # fp32 -> bf16 high part + bf16 residual: three bf16 products then carry ~16 mantissa bits
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    v = tl.load(x + o, mask=m)
    h = v.to(tl.bfloat16)
    tl.store(hi + o, h, mask=m)
    tl.store(lo + o, (v - h.to(tl.float32)).to(tl.bfloat16), mask=m)


@triton.jit
def gemm_bf16x3_kernel(
    ah_ptr,
    al_ptr,
    bh_ptr,
    bl_ptr,
    c_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_IN_KERNEL: tl.constexpr,
):
    # SPLIT_IN_KERNEL: ah_ptr/bh_ptr are the fp32 operands, split per tile (again for every tile it meets)
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BLOCK_N)
    group = 8 * num_n
    first_m = (pid // group) * 8
    gm = min(tl.cdiv(M, BLOCK_M) - first_m, 8)
    pid_m = first_m + ((pid % group) % gm)
    pid_n = (pid % group) // gm
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_off = rm[:, None] * K + rk[None, :]
    b_off = rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(tl.cdiv(K, BLOCK_K)):
        if SPLIT_IN_KERNEL:
            a = tl.load(ah_ptr + a_off)
            b = tl.load(bh_ptr + b_off)
            ah = a.to(tl.bfloat16)
            al = (a - ah.to(tl.float32)).to(tl.bfloat16)
            bh = b.to(tl.bfloat16)
            bl = (b - bh.to(tl.float32)).to(tl.bfloat16)
        else:
            ah = tl.load(ah_ptr + a_off)
            al = tl.load(al_ptr + a_off)
            bh = tl.load(bh_ptr + b_off)
            bl = tl.load(bl_ptr + b_off)
        acc = tl.dot(al, bh, acc)
        acc = tl.dot(ah, bl, acc)
        acc = tl.dot(ah, bh, acc)
        a_off += BLOCK_K
        b_off += BLOCK_K * N
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def conv3x3_direct_kernel(x, w, y, C, H, W, K, BLOCK: tl.constexpr):
    # one output channel and BLOCK pixels per program; a scalar weight load per tap and channel
    pid_nk = tl.program_id(0)
    n = pid_nk // K
    k = pid_nk % K
    p = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    oh = p // W
    ow = p % W
    acc = tl.zeros((BLOCK,), tl.float32)
    for c in range(C):
        for rs in range(9):
            ih = oh + rs // 3 - 1
            iw = ow + rs % 3 - 1
            m = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W) & (p < H * W)
            v = tl.load(x + ((n * C + c) * H + ih) * W + iw, mask=m, other=0.0)
            acc += v * tl.load(w + (k * C + c) * 9 + rs)
    tl.store(y + (n * K + k) * H * W + p, acc, mask=p < H * W)


@triton.jit
def conv3x3_igemm_kernel(
    x, wt, y, C, H, W, K: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, PRECISION: tl.constexpr
):
    # implicit GEMM: BLOCK_P pixels x all K output channels per program, a dot per tap and channel chunk;
    # wt is the weight as [9, C, K] so each tap's chunk is a row-major [BLOCK_C, K] tile
    n = tl.program_id(0)
    p = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)
    oh = p // W
    ow = p % W
    rc = tl.arange(0, BLOCK_C)
    rk = tl.arange(0, K)
    acc = tl.zeros((BLOCK_P, K), tl.float32)
    for rs in range(9):
        ih = oh + rs // 3 - 1
        iw = ow + rs % 3 - 1
        mp = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W) & (p < H * W)
        for c0 in range(0, C, BLOCK_C):
            a = tl.load(
                x + ((n * C + c0 + rc[None, :]) * H + ih[:, None]) * W + iw[:, None], mask=mp[:, None], other=0.0
            )
            b = tl.load(wt + (rs * C + c0 + rc[:, None]) * K + rk[None, :])
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
    tl.store(y + (n * K + rk[None, :]) * H * W + p[:, None], acc.to(y.dtype.element_ty), mask=(p < H * W)[:, None])


@triton.jit
def conv1x1_lanes_k_kernel(x, w, y, C, P, K: tl.constexpr):
    # one pixel per program, its lanes over the output channels: loads of w and stores of y stride by C and P
    n = tl.program_id(0) // P
    p = tl.program_id(0) % P
    rk = tl.arange(0, K)
    acc = tl.zeros((K,), tl.float32)
    for c in range(C):
        acc += tl.load(x + (n * C + c) * P + p) * tl.load(w + rk * C + c)
    tl.store(y + (n * K + rk) * P + p, acc)


@triton.jit
def conv1x1_lanes_p_kernel(x, w, y, C, P, K, BLOCK: tl.constexpr):
    # one output channel and BLOCK pixels per program, lanes along the pixels: contiguous loads and stores
    n = tl.program_id(0) // K
    k = tl.program_id(0) % K
    p = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = p < P
    acc = tl.zeros((BLOCK,), tl.float32)
    for c in range(C):
        acc += tl.load(x + (n * C + c) * P + p, mask=m, other=0.0) * tl.load(w + k * C + c)
    tl.store(y + (n * K + k) * P + p, acc, mask=m)


# ---------------------------------------------------------------------------------------------
# pairs
# ---------------------------------------------------------------------------------------------


class Pair:
    """What a builder returns: the two launches, the check and the problem's figures."""

    def __init__(self, before, after, outputs, ref, meta, tol=FP32_TOL, bf16=False):
        self.before, self.after, self.outputs, self.ref, self.meta, self.tol = before, after, outputs, ref, meta, tol
        self.bf16 = bf16 or meta["dtype"] == "bf16"  # Triton's CPU interpreter does not model bf16 values

    def check(self) -> dict:
        import torch

        r = self.ref().double()
        out = {}
        for which, fn in (("before", self.before), ("after", self.after)):
            fn()
            g = self.outputs[which]().double()
            err = (g - r).abs()
            ok = bool(torch.all(err <= self.tol + self.tol * r.abs()).item())
            out[which] = {"ok": ok, "max_abs_err": float(err.max().item())}
        out["ok"] = out["before"]["ok"] and out["after"]["ok"]
        return out


def _meta(flops, nbytes, dtype="fp32", tol=FP32_TOL, **extra) -> dict:
    return {"flops": float(flops), "bytes": float(nbytes), "dtype": dtype, "atol": tol, "rtol": tol, **extra}


def _t(dev):
    import torch

    g = torch.Generator(device=dev)
    g.manual_seed(0)
    return lambda *shape, dtype=torch.float32: torch.randn(*shape, device=dev, generator=g, dtype=dtype)


def p_fuse_elementwise(dev, tiny):
    import torch

    n = 1 << (12 if tiny else 25)
    x = _t(dev)(n)
    t1, t2, y1, y2 = (torch.empty_like(x) for _ in range(4))
    B = 1024
    g = (triton.cdiv(n, B),)

    def before():
        ew_mul_kernel[g](x, t1, n, 2.0, BLOCK=B)
        ew_add_kernel[g](t1, t2, n, 1.0, BLOCK=B)
        ew_relu_kernel[g](t2, y1, n, BLOCK=B)

    def after():
        ew_fused_kernel[g](x, y2, n, BLOCK=B)

    return Pair(
        before, after, {"before": lambda: y1, "after": lambda: y2}, lambda: torch.relu(x * 2 + 1), _meta(3 * n, 8 * n)
    )


def p_fuse_small_chain(dev, tiny):
    import torch

    n = 4096
    x = _t(dev)(n)
    t1, t2, y1, y2 = (torch.empty_like(x) for _ in range(4))
    g = (4,)

    def before():
        ew_mul_kernel[g](x, t1, n, 2.0, BLOCK=1024)
        ew_add_kernel[g](t1, t2, n, 1.0, BLOCK=1024)
        ew_relu_kernel[g](t2, y1, n, BLOCK=1024)

    def after():
        ew_fused_kernel[g](x, y2, n, BLOCK=1024)

    return Pair(
        before, after, {"before": lambda: y1, "after": lambda: y2}, lambda: torch.relu(x * 2 + 1), _meta(3 * n, 8 * n)
    )


def _softmax_inputs(dev, tiny, rows=4096, cols=8192):
    import torch

    rows, cols = (16, 256) if tiny else (rows, cols)
    x = _t(dev)(rows, cols)
    return rows, cols, x, torch.empty_like(x), torch.empty_like(x)


def p_fuse_softmax(dev, tiny):
    import torch

    rows, cols, x, y1, y2 = _softmax_inputs(dev, tiny)
    m = torch.empty(rows, device=dev)
    s = torch.empty(rows, device=dev)

    def before():
        row_max_kernel[(rows,)](x, m, cols, cols, BLOCK=cols, num_warps=8)
        row_sumexp_kernel[(rows,)](x, m, s, cols, cols, BLOCK=cols, num_warps=8)
        softmax_scale_kernel[(rows,)](x, m, s, y1, cols, cols, BLOCK=cols, num_warps=8)

    def after():
        softmax_row_kernel[(rows,)](x, y2, cols, cols, BLOCK=cols, num_warps=8)

    return Pair(
        before,
        after,
        {"before": lambda: y1, "after": lambda: y2},
        lambda: torch.softmax(x.double(), -1),
        _meta(5 * rows * cols, 8 * rows * cols),
    )


def _gemm_launch(a, b, c, bias, m, n, k, cfg, precision="ieee", epilogue=0):
    bm, bn, bk = cfg["BM"], cfg["BN"], cfg["BK"]
    gemm_kernel[(triton.cdiv(m, bm) * triton.cdiv(n, bn),)](
        a,
        b,
        c,
        bias,
        m,
        n,
        k,
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        PRECISION=precision,
        EPILOGUE=epilogue,
        num_warps=cfg.get("warps", 4),
        num_stages=cfg.get("stages", 3),
    )


def p_fuse_gemm_epilogue(dev, tiny):
    import torch

    m = n = k = 64 if tiny else 4096
    r = _t(dev)
    a, b = r(m, k, dtype=torch.bfloat16), r(k, n, dtype=torch.bfloat16)
    bias = r(n)
    c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
    y1, y2 = torch.empty_like(c), torch.empty_like(c)
    cfg = {"BM": 32, "BN": 32, "BK": 32, "warps": 4, "stages": 2} if tiny else {"BM": 128, "BN": 128, "BK": 64}

    def before():
        _gemm_launch(a, b, c, bias, m, n, k, cfg)
        bias_relu_kernel[(m,)](c, bias, y1, n, BLOCK=n, num_warps=4)

    def after():
        _gemm_launch(a, b, y2, bias, m, n, k, cfg, epilogue=1)

    return Pair(
        before,
        after,
        {"before": lambda: y1, "after": lambda: y2},
        lambda: torch.relu(a.float() @ b.float() + bias),
        _meta(2 * m * n * k, (m * k + k * n + m * n) * 2 + 4 * n, "bf16", BF16_TOL),
        tol=5e-2,
    )


def _bf16x3_inputs(dev, tiny):
    import torch

    m = n = k = 64 if tiny else 4096
    r = _t(dev)
    a, b = r(m, k), r(k, n)
    ah, al = torch.empty(m, k, device=dev, dtype=torch.bfloat16), torch.empty(m, k, device=dev, dtype=torch.bfloat16)
    bh, bl = torch.empty(k, n, device=dev, dtype=torch.bfloat16), torch.empty(k, n, device=dev, dtype=torch.bfloat16)
    cfg = {"BM": 32, "BN": 32, "BK": 32, "warps": 4, "stages": 2} if tiny else {"BM": 128, "BN": 128, "BK": 64}
    return m, n, k, a, b, ah, al, bh, bl, cfg


def _bf16x3_gemm(args, c, fused, cfg, m, n, k):
    ah, al, bh, bl = args
    gemm_bf16x3_kernel[(triton.cdiv(m, cfg["BM"]) * triton.cdiv(n, cfg["BN"]),)](
        ah,
        al,
        bh,
        bl,
        c,
        m,
        n,
        k,
        BLOCK_M=cfg["BM"],
        BLOCK_N=cfg["BN"],
        BLOCK_K=cfg["BK"],
        SPLIT_IN_KERNEL=fused,
        num_warps=cfg.get("warps", 8),
        num_stages=cfg.get("stages", 3),
    )


def p_fuse_split_into_gemm(dev, tiny):
    """A memory-bound operand split folded into a compute-bound bf16x3 GEMM: each tile is split again
    for every program that loads it, on a pipe that is already busy."""
    import torch

    m, n, k, a, b, ah, al, bh, bl, cfg = _bf16x3_inputs(dev, tiny)
    c1, c2 = torch.empty(m, n, device=dev), torch.empty(m, n, device=dev)

    def before():
        split_bf16_kernel[(triton.cdiv(m * k, 1024),)](a, ah, al, m * k, BLOCK=1024)
        split_bf16_kernel[(triton.cdiv(k * n, 1024),)](b, bh, bl, k * n, BLOCK=1024)
        _bf16x3_gemm((ah, al, bh, bl), c1, False, cfg, m, n, k)

    def after():
        _bf16x3_gemm((a, a, b, b), c2, True, cfg, m, n, k)

    return Pair(
        before,
        after,
        {"before": lambda: c1, "after": lambda: c2},
        lambda: a.double() @ b.double(),
        _meta(2 * m * n * k, (m * k + k * n + m * n) * 4),
        tol=2e-3 * (k**0.5),
        bf16=True,
    )


def _gemm_pair(dev, tiny, dtype, before_cfg, after_cfg, before_prec, after_prec, shape=(2048, 2048, 2048)):
    import torch

    m, n, k = (64, 64, 64) if tiny else shape
    r = _t(dev)
    td = torch.bfloat16 if dtype == "bf16" else torch.float32
    a, b = r(m, k, dtype=td), r(k, n, dtype=td)
    c1, c2 = torch.empty(m, n, device=dev, dtype=td), torch.empty(m, n, device=dev, dtype=td)
    small = {"BM": 32, "BN": 32, "BK": 32, "warps": 4, "stages": 2}
    bc, ac = (small, small) if tiny else (before_cfg, after_cfg)

    def before():
        _gemm_launch(a, b, c1, None, m, n, k, bc, before_prec)

    def after():
        _gemm_launch(a, b, c2, None, m, n, k, ac, after_prec)

    es = 2 if dtype == "bf16" else 4
    tol = BF16_TOL if dtype == "bf16" else FP32_TOL
    return Pair(
        before,
        after,
        {"before": lambda: c1, "after": lambda: c2},
        lambda: a.double() @ b.double(),
        _meta(2 * m * n * k, (m * k + k * n + m * n) * es, dtype, tol),
        tol=(5e-2 if dtype == "bf16" else 2e-3),
    )


BIG = {"BM": 128, "BN": 128, "BK": 32, "warps": 8, "stages": 3}


def p_tc_gemm_2048(dev, tiny):
    return _gemm_pair(dev, tiny, "fp32", BIG, BIG, "ieee", "tf32x3")


def p_tc_gemm_tall(dev, tiny):
    return _gemm_pair(dev, tiny, "fp32", BIG, BIG, "ieee", "tf32x3", shape=(8192, 1024, 1024))


def p_tc_gemm_small_tiles(dev, tiny):
    cfg = {"BM": 64, "BN": 64, "BK": 32, "warps": 4, "stages": 3}
    return _gemm_pair(dev, tiny, "fp32", cfg, cfg, "ieee", "tf32x3", shape=(1024, 1024, 4096))


def p_feed_bf16_tiles(dev, tiny):
    return _gemm_pair(
        dev,
        tiny,
        "bf16",
        {"BM": 64, "BN": 64, "BK": 32, "warps": 4, "stages": 2},
        {"BM": 128, "BN": 256, "BK": 64, "warps": 8, "stages": 3},
        "ieee",
        "ieee",
        shape=(4096, 4096, 4096),
    )


def p_feed_bf16_stages(dev, tiny):
    return _gemm_pair(
        dev,
        tiny,
        "bf16",
        {"BM": 128, "BN": 128, "BK": 64, "warps": 4, "stages": 1},
        {"BM": 128, "BN": 128, "BK": 64, "warps": 4, "stages": 4},
        "ieee",
        "ieee",
        shape=(4096, 4096, 4096),
    )


def p_feed_3xtf32_tiles(dev, tiny):
    return _gemm_pair(
        dev,
        tiny,
        "fp32",
        {"BM": 64, "BN": 64, "BK": 32, "warps": 4, "stages": 2},
        {"BM": 128, "BN": 128, "BK": 32, "warps": 8, "stages": 3},
        "tf32x3",
        "tf32x3",
    )


def p_grid_gemm(dev, tiny):
    cfg_b = {"BM": 128, "BN": 128, "BK": 32, "warps": 8, "stages": 3}
    cfg_a = {"BM": 64, "BN": 64, "BK": 32, "warps": 4, "stages": 3}
    return _gemm_pair(dev, tiny, "fp32", cfg_b, cfg_a, "tf32x3", "tf32x3", shape=(1024, 1024, 8192))


def _conv_inputs(dev, tiny, dtype="fp32"):
    import torch

    nb, c, h, w, k = (1, 16, 8, 8, 16) if tiny else (8, 64, 64, 64, 64)
    r = _t(dev)
    td = torch.bfloat16 if dtype == "bf16" else torch.float32
    x = r(nb, c, h, w, dtype=td)
    wt = r(k, c, 3, 3, dtype=td)
    w9 = wt.permute(2, 3, 1, 0).reshape(9, c, k).contiguous()
    y1 = torch.empty(nb, k, h, w, device=dev, dtype=td)
    y2 = torch.empty_like(y1)
    ref = lambda: torch.nn.functional.conv2d(x.double(), wt.double(), padding=1)  # noqa: E731
    es = 2 if dtype == "bf16" else 4
    meta = _meta(
        2 * nb * k * h * w * c * 9,
        (x.numel() + wt.numel() + y1.numel()) * es,
        dtype,
        BF16_TOL if dtype == "bf16" else FP32_TOL,
        conv=[nb, c, h, w, k],
    )
    return nb, c, h, w, k, x, wt, w9, y1, y2, ref, meta


def _igemm(x, w9, y, nb, c, h, w, k, bp, bc, prec, warps=4, stages=2):
    conv3x3_igemm_kernel[(nb, triton.cdiv(h * w, bp))](
        x, w9, y, c, h, w, K=k, BLOCK_P=bp, BLOCK_C=bc, PRECISION=prec, num_warps=warps, num_stages=stages
    )


def p_conv_direct_to_igemm(dev, tiny):
    """A direct conv, one output channel and a scalar weight per tap per program: more independent work
    per program (all output channels of a pixel block, as an FMA dot)."""
    nb, c, h, w, k, x, wt, w9, y1, y2, ref, meta = _conv_inputs(dev, tiny)

    def before():
        conv3x3_direct_kernel[(nb * k, triton.cdiv(h * w, 128))](x, wt, y1, c, h, w, k, BLOCK=128, num_warps=4)

    def after():
        _igemm(x, w9, y2, nb, c, h, w, k, 64, 16, "ieee")

    return Pair(before, after, {"before": lambda: y1, "after": lambda: y2}, ref, meta, tol=1e-3)


def p_conv_tc(dev, tiny):
    nb, c, h, w, k, x, _wt, w9, y1, y2, ref, meta = _conv_inputs(dev, tiny)

    def before():
        _igemm(x, w9, y1, nb, c, h, w, k, 64, 16, "ieee")

    def after():
        _igemm(x, w9, y2, nb, c, h, w, k, 64, 16, "tf32x3")

    return Pair(before, after, {"before": lambda: y1, "after": lambda: y2}, ref, meta, tol=1e-3)


def p_conv_direct_tc(dev, tiny):
    """The direct conv straight to an implicit GEMM on tensor cores (3xTF32 passes 1e-4)."""
    nb, c, h, w, k, x, wt, w9, y1, y2, ref, meta = _conv_inputs(dev, tiny)

    def before():
        conv3x3_direct_kernel[(nb * k, triton.cdiv(h * w, 128))](x, wt, y1, c, h, w, k, BLOCK=128, num_warps=4)

    def after():
        _igemm(x, w9, y2, nb, c, h, w, k, 64, 16, "tf32x3")

    return Pair(before, after, {"before": lambda: y1, "after": lambda: y2}, ref, meta, tol=1e-3)


def p_tc_gemm_naive(dev, tiny):
    return _gemm_pair(
        dev,
        tiny,
        "fp32",
        {"BM": 32, "BN": 32, "BK": 32, "warps": 4, "stages": 1},
        {"BM": 128, "BN": 128, "BK": 32, "warps": 8, "stages": 3},
        "ieee",
        "tf32x3",
    )


def p_conv_bf16_stages(dev, tiny):
    """A gather-style bf16 implicit-GEMM conv: small dots behind strided gathers, the tensor pipe idles
    for latency. Deeper pipelining is what feeding a tensor pipe would ask for."""
    nb, c, h, w, k, x, _wt, w9, y1, y2, ref, meta = _conv_inputs(dev, tiny, "bf16")

    def before():
        _igemm(x, w9, y1, nb, c, h, w, k, 64, 16, "ieee", stages=1)

    def after():
        _igemm(x, w9, y2, nb, c, h, w, k, 64, 16, "ieee", stages=4)

    return Pair(before, after, {"before": lambda: y1, "after": lambda: y2}, ref, meta, tol=0.25)


def p_conv_bf16_more_work(dev, tiny):
    """The same gather-style bf16 conv: more output per program and wider channel chunks (latency advice)."""
    nb, c, h, w, k, x, _wt, w9, y1, y2, ref, meta = _conv_inputs(dev, tiny, "bf16")
    bp, bc = (64, 16) if tiny else (128, 64)

    def before():
        _igemm(x, w9, y1, nb, c, h, w, k, 64, 16, "ieee", stages=1)

    def after():
        _igemm(x, w9, y2, nb, c, h, w, k, bp, bc, "ieee", warps=8, stages=2)

    return Pair(before, after, {"before": lambda: y1, "after": lambda: y2}, ref, meta, tol=0.25)


def p_coalesce_conv1x1(dev, tiny):
    """A 1x1 conv with its lanes over the output channels: every store lands in its own sector."""
    import torch

    nb, c, k, hw = (1, 16, 16, 64) if tiny else (8, 64, 64, 4096)
    r = _t(dev)
    x, w = r(nb, c, hw), r(k, c)
    y1, y2 = torch.empty(nb, k, hw, device=dev), torch.empty(nb, k, hw, device=dev)

    def before():
        conv1x1_lanes_k_kernel[(nb * hw,)](x, w, y1, c, hw, K=k, num_warps=2)

    def after():
        conv1x1_lanes_p_kernel[(nb * k, triton.cdiv(hw, 128))](x, w, y2, c, hw, k, BLOCK=128, num_warps=4)

    return Pair(
        before,
        after,
        {"before": lambda: y1, "after": lambda: y2},
        lambda: torch.einsum("kc,ncp->nkp", w.double(), x.double()),
        _meta(2 * nb * k * c * hw, (x.numel() + w.numel() + y1.numel()) * 4, conv=[nb, c, hw, k]),
        tol=1e-3,
    )


def p_latency_conv1x1(dev, tiny):
    """The coalesced 1x1 conv with 32 pixels and one warp per program: few bytes in flight per SM."""
    import torch

    nb, c, k, hw = (1, 16, 16, 64) if tiny else (8, 64, 64, 4096)
    r = _t(dev)
    x, w = r(nb, c, hw), r(k, c)
    y1, y2 = torch.empty(nb, k, hw, device=dev), torch.empty(nb, k, hw, device=dev)

    def before():
        conv1x1_lanes_p_kernel[(nb * k, triton.cdiv(hw, 32))](x, w, y1, c, hw, k, BLOCK=32, num_warps=1)

    def after():
        conv1x1_lanes_p_kernel[(nb * k, triton.cdiv(hw, 256))](x, w, y2, c, hw, k, BLOCK=256, num_warps=4)

    return Pair(
        before,
        after,
        {"before": lambda: y1, "after": lambda: y2},
        lambda: torch.einsum("kc,ncp->nkp", w.double(), x.double()),
        _meta(2 * nb * k * c * hw, (x.numel() + w.numel() + y1.numel()) * 4, conv=[nb, c, hw, k]),
        tol=1e-3,
    )


def p_latency_softmax(dev, tiny):
    import torch

    rows, cols, x, y1, y2 = _softmax_inputs(dev, tiny)
    progs = 8 if tiny else 512

    def before():
        softmax_chunked_kernel[(progs,)](x, y1, rows, cols, cols, BLOCK=128, num_warps=1, num_stages=1)

    def after():
        softmax_row_kernel[(rows,)](x, y2, cols, cols, BLOCK=cols, num_warps=8)

    return Pair(
        before,
        after,
        {"before": lambda: y1, "after": lambda: y2},
        lambda: torch.softmax(x.double(), -1),
        _meta(5 * rows * cols, 8 * rows * cols),
    )


def p_latency_softmax_wide(dev, tiny):
    import torch

    rows, cols, x, y1, y2 = _softmax_inputs(dev, tiny)
    progs = 8 if tiny else 1024

    def before():
        softmax_chunked_kernel[(progs,)](x, y1, rows, cols, cols, BLOCK=256, num_warps=2, num_stages=1)

    def after():
        softmax_chunked_kernel[(rows,)](x, y2, rows, cols, cols, BLOCK=min(2048, cols), num_warps=8, num_stages=1)

    return Pair(
        before,
        after,
        {"before": lambda: y1, "after": lambda: y2},
        lambda: torch.softmax(x.double(), -1),
        _meta(5 * rows * cols, 8 * rows * cols),
    )


def p_latency_row_sum(dev, tiny):
    import torch

    rows, cols = (16, 256) if tiny else (16384, 4096)
    x = _t(dev)(rows, cols)
    y1, y2 = torch.empty(rows, device=dev), torch.empty(rows, device=dev)

    def before():
        row_sum_loop_kernel[(rows,)](x, y1, cols, cols, BLOCK=32, num_warps=1)

    def after():
        row_sum_loop_kernel[(rows,)](x, y2, cols, cols, BLOCK=1024, num_warps=4)

    return Pair(
        before,
        after,
        {"before": lambda: y1, "after": lambda: y2},
        lambda: x.double().sum(-1),
        _meta(rows * cols, 4 * rows * cols),
        tol=1e-3,
    )


def p_latency_tiny_blocks(dev, tiny):
    import torch

    n = 1 << (12 if tiny else 25)
    x = _t(dev)(n)
    y1, y2 = torch.empty_like(x), torch.empty_like(x)

    def before():
        ew_fused_kernel[(triton.cdiv(n, 32),)](x, y1, n, BLOCK=32, num_warps=1)

    def after():
        ew_fused_kernel[(triton.cdiv(n, 2048),)](x, y2, n, BLOCK=2048, num_warps=4)

    return Pair(
        before, after, {"before": lambda: y1, "after": lambda: y2}, lambda: torch.relu(x * 2 + 1), _meta(3 * n, 8 * n)
    )


def p_coalesce_transpose(dev, tiny):
    import torch

    mm, nn = (64, 64) if tiny else (8192, 8192)
    x = _t(dev)(mm, nn)
    y1, y2 = torch.empty(nn, mm, device=dev), torch.empty(nn, mm, device=dev)

    def before():
        transpose_rows_kernel[(mm, triton.cdiv(nn, 1024))](x, y1, mm, nn, BLOCK=1024, num_warps=4)

    def after():
        transpose_tile_kernel[(triton.cdiv(mm, 64), triton.cdiv(nn, 64))](x, y2, mm, nn, BM=64, BN=64, num_warps=4)

    return Pair(
        before, after, {"before": lambda: y1, "after": lambda: y2}, lambda: x.t(), _meta(0, 8 * mm * nn), tol=0.0
    )


def p_coalesce_columns(dev, tiny):
    import torch

    mm, nn = (64, 64) if tiny else (8192, 4096)
    x = _t(dev)(mm, nn)
    y1, y2 = torch.empty_like(x), torch.empty_like(x)
    B = 32 if tiny else 256

    def before():
        scale2d_kernel[(nn * triton.cdiv(mm, B),)](x, y1, mm, nn, 3.0, ALONG_ROWS=True, BLOCK=B, num_warps=4)

    def after():
        scale2d_kernel[(triton.cdiv(mm * nn, 1024),)](x, y2, mm, nn, 3.0, ALONG_ROWS=False, BLOCK=1024, num_warps=4)

    return Pair(before, after, {"before": lambda: y1, "after": lambda: y2}, lambda: x * 3, _meta(mm * nn, 8 * mm * nn))


def p_coalesce_pairs(dev, tiny):
    """Stride-2 loads whose sectors the other load uses: DRAM already moves only what is needed."""
    import torch

    n = 1 << (10 if tiny else 25)
    x = _t(dev)(2 * n)
    y1, y2 = torch.empty(n, device=dev), torch.empty(n, device=dev)

    def before():
        pair_sum_strided_kernel[(triton.cdiv(n, 1024),)](x, y1, n, BLOCK=1024)

    def after():
        pair_sum_contig_kernel[(triton.cdiv(n, 1024),)](x, y2, n, BLOCK=1024)

    return Pair(
        before,
        after,
        {"before": lambda: y1, "after": lambda: y2},
        lambda: x[0::2] + x[1::2],
        _meta(n, 12 * n),
    )


def p_coalesce_transpose_small_tile(dev, tiny):
    import torch

    mm, nn = (64, 64) if tiny else (4096, 4096)
    x = _t(dev)(mm, nn)
    y1, y2 = torch.empty(nn, mm, device=dev), torch.empty(nn, mm, device=dev)

    def before():
        transpose_rows_kernel[(mm, triton.cdiv(nn, 256))](x, y1, mm, nn, BLOCK=256, num_warps=2)

    def after():
        transpose_tile_kernel[(triton.cdiv(mm, 32), triton.cdiv(nn, 32))](x, y2, mm, nn, BM=32, BN=32, num_warps=4)

    return Pair(
        before, after, {"before": lambda: y1, "after": lambda: y2}, lambda: x.t(), _meta(0, 8 * mm * nn), tol=0.0
    )


def p_spills_layernorm(dev, tiny):
    import torch

    rows, cols = (8, 256) if tiny else (4096, 16384)
    r = _t(dev)
    x, w, b = r(rows, cols), r(cols), r(cols)
    y1, y2 = torch.empty_like(x), torch.empty_like(x)

    def before():
        layernorm_row_kernel[(rows,)](x, w, b, y1, cols, cols, 1e-5, BLOCK=cols, num_warps=2)

    def after():
        layernorm_row_kernel[(rows,)](x, w, b, y2, cols, cols, 1e-5, BLOCK=cols, num_warps=16)

    return Pair(
        before,
        after,
        {"before": lambda: y1, "after": lambda: y2},
        lambda: torch.nn.functional.layer_norm(x.double(), (cols,), w.double(), b.double(), 1e-5),
        _meta(8 * rows * cols, 8 * rows * cols),
        tol=1e-3,
    )


def p_spills_softmax(dev, tiny):
    import torch

    rows, cols, x, y1, y2 = _softmax_inputs(dev, tiny, 2048, 16384)

    def before():
        softmax_row_kernel[(rows,)](x, y1, cols, cols, BLOCK=cols, num_warps=2)

    def after():
        softmax_row_kernel[(rows,)](x, y2, cols, cols, BLOCK=cols, num_warps=16)

    return Pair(
        before,
        after,
        {"before": lambda: y1, "after": lambda: y2},
        lambda: torch.softmax(x.double(), -1),
        _meta(5 * rows * cols, 8 * rows * cols),
    )


def p_atomic_bins(dev, tiny):
    import torch

    n = 1 << (12 if tiny else 22)
    x = _t(dev)(n)
    o1, o2 = torch.zeros(8, device=dev), torch.zeros(8, device=dev)

    def before():
        o1.zero_()
        bins_atomic_kernel[(triton.cdiv(n, 1024),)](x, o1, n, BINS=8, BLOCK=1024)

    def after():
        o2.zero_()
        bins_block_kernel[(triton.cdiv(n, 1024),)](x, o2, n, BINS=8, BLOCK=1024)

    return Pair(
        before,
        after,
        {"before": lambda: o1, "after": lambda: o2},
        lambda: x.double().reshape(-1, 8).sum(0),
        _meta(n, 4 * n),
        tol=1e-2,
    )


def p_atomic_one_bin(dev, tiny):
    import torch

    n = 1 << (12 if tiny else 21)
    x = _t(dev)(n)
    o1, o2 = torch.zeros(1, device=dev), torch.zeros(1, device=dev)

    def before():
        o1.zero_()
        bins_atomic_kernel[(triton.cdiv(n, 1024),)](x, o1, n, BINS=1, BLOCK=1024)

    def after():
        o2.zero_()
        bins_block_kernel[(triton.cdiv(n, 1024),)](x, o2, n, BINS=1, BLOCK=1024)

    return Pair(
        before,
        after,
        {"before": lambda: o1, "after": lambda: o2},
        lambda: x.double().sum().reshape(1),
        _meta(n, 4 * n),
        tol=5e-2,
    )


def p_grid_row_sum(dev, tiny):
    import torch

    rows, cols = (4, 1024) if tiny else (64, 1 << 18)
    x = _t(dev)(rows, cols)
    y1, y2 = torch.zeros(rows, device=dev), torch.zeros(rows, device=dev)
    splits = 4 if tiny else 32
    chunk = cols // splits

    def before():
        row_sum_loop_kernel[(rows,)](x, y1, cols, cols, BLOCK=1024, num_warps=8)

    def after():
        y2.zero_()
        row_sum_split_kernel[(rows, splits)](x, y2, cols, cols, chunk, BLOCK=min(1024, chunk), num_warps=8)

    return Pair(
        before,
        after,
        {"before": lambda: y1, "after": lambda: y2},
        lambda: x.double().sum(-1),
        _meta(rows * cols, 4 * rows * cols),
        tol=1e-2,
    )


def p_grid_persistent(dev, tiny):
    import torch

    n = 1 << (12 if tiny else 25)
    x = _t(dev)(n)
    y1, y2 = torch.empty_like(x), torch.empty_like(x)

    def before():
        ew_persistent_kernel[(4 if tiny else 32,)](x, y1, n, BLOCK=1024, num_warps=4)

    def after():
        ew_fused_kernel[(triton.cdiv(n, 1024),)](x, y2, n, BLOCK=1024, num_warps=4)

    return Pair(
        before, after, {"before": lambda: y1, "after": lambda: y2}, lambda: torch.relu(x * 2 + 1), _meta(3 * n, 8 * n)
    )


def p_limit_layernorm(dev, tiny):
    import torch

    rows, cols = (8, 256) if tiny else (8192, 8192)
    r = _t(dev)
    x, w, b = r(rows, cols), r(cols), r(cols)
    y1, y2 = torch.empty_like(x), torch.empty_like(x)

    def before():
        layernorm_row_kernel[(rows,)](x, w, b, y1, cols, cols, 1e-5, BLOCK=cols, num_warps=16)

    def after():
        layernorm_row_kernel[(rows,)](x, w, b, y2, cols, cols, 1e-5, BLOCK=cols, num_warps=8)

    return Pair(
        before,
        after,
        {"before": lambda: y1, "after": lambda: y2},
        lambda: torch.nn.functional.layer_norm(x.double(), (cols,), w.double(), b.double(), 1e-5),
        _meta(8 * rows * cols, 8 * rows * cols),
        tol=1e-3,
    )


def p_limit_add(dev, tiny):
    import torch

    n = 1 << (12 if tiny else 26)
    r = _t(dev)
    a, b = r(n), r(n)
    y1, y2 = torch.empty_like(a), torch.empty_like(a)

    def before():
        add_kernel[(triton.cdiv(n, 1024),)](a, b, y1, n, BLOCK=1024, num_warps=4)

    def after():
        add_kernel[(triton.cdiv(n, 4096),)](a, b, y2, n, BLOCK=4096, num_warps=8)

    return Pair(before, after, {"before": lambda: y1, "after": lambda: y2}, lambda: a + b, _meta(n, 12 * n))


# name: (rule the change follows, builder, what the change is)
PAIRS: dict[str, tuple[str, object, str]] = {
    "fuse_elementwise": ("fuse_launches", p_fuse_elementwise, "three element-wise kernels (32M floats) into one"),
    "fuse_small_chain": ("fuse_launches", p_fuse_small_chain, "three element-wise kernels (4096 floats) into one"),
    "fuse_softmax": ("fuse_launches", p_fuse_softmax, "max, sum of exp and scale kernels into one row softmax"),
    "fuse_gemm_epilogue": ("fuse_launches", p_fuse_gemm_epilogue, "bias + ReLU kernel into the bf16 GEMM epilogue"),
    "fuse_split_into_gemm": (
        "fuse_launches",
        p_fuse_split_into_gemm,
        "the bf16 hi/lo operand split into the bf16x3 GEMM's main loop",
    ),
    "tc_gemm_2048": ("use_tensor_cores", p_tc_gemm_2048, "fp32 FMA dot -> 3xTF32 dot, 2048^3"),
    "tc_gemm_tall": ("use_tensor_cores", p_tc_gemm_tall, "fp32 FMA dot -> 3xTF32 dot, 8192x1024x1024"),
    "tc_gemm_small_tiles": ("use_tensor_cores", p_tc_gemm_small_tiles, "fp32 FMA dot -> 3xTF32, 64x64 tiles"),
    "tc_conv": ("use_tensor_cores", p_conv_tc, "implicit-GEMM conv: FMA dot -> 3xTF32 dot"),
    "tc_conv_direct": ("use_tensor_cores", p_conv_direct_tc, "direct conv -> 3xTF32 implicit-GEMM conv"),
    "tc_gemm_naive": (
        "use_tensor_cores",
        p_tc_gemm_naive,
        "fp32 FMA dot, 32x32 tiles, 1 stage -> 3xTF32 dot, 128x128, 3 stages, 2048^3",
    ),
    "feed_bf16_tiles": ("feed_tensor_pipe", p_feed_bf16_tiles, "bf16 GEMM 64x64x32 -> 128x256x64, 8 warps"),
    "feed_bf16_stages": ("feed_tensor_pipe", p_feed_bf16_stages, "bf16 GEMM 1 stage -> 4 stages"),
    "feed_3xtf32_tiles": ("feed_tensor_pipe", p_feed_3xtf32_tiles, "3xTF32 GEMM 64x64, 2 stages -> 128x128, 3"),
    "feed_conv_bf16_stages": (
        "feed_tensor_pipe",
        p_conv_bf16_stages,
        "gather-style bf16 conv: 1 stage -> 4 stages",
    ),
    "work_conv_direct": (
        "issue_bound",
        p_conv_direct_to_igemm,
        "direct conv (one channel per program) -> all channels of a pixel block per program",
    ),
    "latency_conv_bf16": (
        "latency_bound",
        p_conv_bf16_more_work,
        "gather-style bf16 conv: 64 -> 128 pixels and 16 -> 64 channels per step",
    ),
    "latency_conv1x1": (
        "latency_bound",
        p_latency_conv1x1,
        "1x1 conv: 32 pixels and 1 warp per program -> 256 pixels and 4 warps",
    ),
    "latency_softmax": ("latency_bound", p_latency_softmax, "1-warp chunked softmax -> one row per 8-warp program"),
    "latency_softmax_wide": ("latency_bound", p_latency_softmax_wide, "256-wide chunks -> 2048-wide, 8 warps"),
    "latency_row_sum": ("latency_bound", p_latency_row_sum, "row sum: 32-wide 1-warp loop -> 1024-wide, 4 warps"),
    "latency_tiny_blocks": ("latency_bound", p_latency_tiny_blocks, "32-element 1-warp programs -> 2048, 4 warps"),
    "coalesce_transpose": ("uncoalesced_access", p_coalesce_transpose, "row-read transpose -> 64x64 tile transpose"),
    "coalesce_transpose_small": (
        "uncoalesced_access",
        p_coalesce_transpose_small_tile,
        "row-read transpose (4096^2) -> 32x32 tile transpose",
    ),
    "coalesce_columns": ("uncoalesced_access", p_coalesce_columns, "lanes down a column -> along a row"),
    "coalesce_conv1x1": (
        "uncoalesced_access",
        p_coalesce_conv1x1,
        "1x1 conv: lanes over output channels (strided stores) -> lanes over pixels",
    ),
    "coalesce_pairs": ("uncoalesced_access", p_coalesce_pairs, "two stride-2 loads -> one contiguous load + split"),
    "spills_layernorm": ("register_spills", p_spills_layernorm, "16384-wide row in 2 warps -> 16 warps"),
    "spills_softmax": ("register_spills", p_spills_softmax, "16384-wide row in 2 warps -> 16 warps"),
    "atomic_bins": ("atomic_contention", p_atomic_bins, "an atomic per element into 8 bins -> one per bin per block"),
    "atomic_one_bin": ("atomic_contention", p_atomic_one_bin, "an atomic per element into 1 float -> one per block"),
    "grid_row_sum": ("grid_too_small", p_grid_row_sum, "64 programs -> 64 x 32 with atomic partial sums"),
    "grid_persistent": ("grid_too_small", p_grid_persistent, "32 looping programs -> one per 1024 elements"),
    "grid_gemm": ("grid_too_small", p_grid_gemm, "3xTF32 GEMM 1024^2 x 8192: 64 tiles of 128 -> 256 tiles of 64"),
    "limit_layernorm": ("at_the_limit", p_limit_layernorm, "row-in-registers layernorm: 16 -> 8 warps"),
    "limit_add": ("at_the_limit", p_limit_add, "streaming add: 1024 -> 4096 per program"),
}


def build(name: str, device: str = "cuda", tiny: bool = False) -> Pair:
    return PAIRS[name][1](device, tiny)


if __name__ == "__main__":  # CPU check: TRITON_INTERPRET=1 python bench/analysis/pairs.py [NAME ...]
    import os
    import sys
    import time

    names = sys.argv[1:] or list(PAIRS)
    bad = 0
    for name in names:
        t = time.time()
        try:
            p = build(name, "cpu", tiny=True)
            res = p.check()
        except Exception as e:  # noqa: BLE001  (report every pair, not just the first failure)
            res = {"ok": False, "error": f"{type(e).__name__}: {e}"[:400]}
        if not res.get("ok") and "error" not in res and p.bf16 and os.environ.get("TRITON_INTERPRET") == "1":
            res = {"ok": True, "ran": "bf16 values are not modelled by the interpreter: checked on the GPU only"}
        bad += not res.get("ok")
        print(f"{name:28s} {'ok ' if res.get('ok') else 'BAD'} {time.time() - t:5.1f}s {res}", flush=True)
    print(f"{len(names) - bad}/{len(names)} pairs ok")
    raise SystemExit(1 if bad else 0)
