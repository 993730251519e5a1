"""The matrix products of a pass: their precision and their row chunks.

A pass adds products ``X~^T [r X~]`` over the rows of each batch. On a CPU they run
over row chunks that stay in cache; on an accelerator over few large chunks. A
dense Hessian's products may run in a lower precision than the working dtype
(:data:`HESSIAN_PRECISIONS`, for a stage another stage verifies).
"""

from __future__ import annotations

import torch

from .sparse_rows import SparseRows

__all__ = ["HESSIAN_PRECISIONS", "ACCELERATOR_CHUNK", "add_product", "chunk_rows", "fused_rows", "rt_x"]


#: Precisions of a dense Hessian's products (:class:`PassSums`): ``"highest"``, the
#: working dtype; ``"tf32"``, float32 products on TF32 tensor cores (CUDA; the working
#: dtype elsewhere, where there are none); ``"bf16"``, bfloat16 operands (8 bits of
#: mantissa) with each chunk's product added in the working dtype (on a CUDA device
#: the product itself is accumulated and returned in float32).
HESSIAN_PRECISIONS = ("highest", "tf32", "bf16")


def add_product(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, precision: str) -> None:
    """``out += a @ b`` in the given precision (:data:`HESSIAN_PRECISIONS`)."""
    if precision == "bf16":
        a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
        if out.is_cuda and out.dtype == torch.float32:
            out += torch.mm(a, b, out_dtype=torch.float32)  # cuBLAS: float32 accumulate and result
        else:
            # (no float32 result for bfloat16 operands on a CPU: each chunk's result is
            # rounded to bfloat16, about 1e-3 relative on a CPU's chunks)
            out += torch.mm(a, b).to(out.dtype)
    elif precision == "tf32" and out.is_cuda and out.dtype == torch.float32:
        matmul = torch.backends.cuda.matmul  # the fp32_precision API (the legacy flag must not mix with it)
        before = matmul.fp32_precision
        matmul.fp32_precision = "tf32"
        try:
            out.addmm_(a, b)
        finally:
            matmul.fp32_precision = before
    else:
        out.addmm_(a, b)


def fused_rows(x: torch.Tensor) -> int | None:
    """Rows per slab of a pass over a dense design on a CPU (about 4 MB each), or
    ``None`` for one piece: sparse, on an accelerator, or small enough for cache."""
    if x.is_sparse or x.device.type != "cpu" or x.numel() * x.element_size() <= 2**23:
        return None
    return chunk_rows(x, x.shape[1], cpu_budget=2**19)


#: Elements per product chunk on an accelerator (few, large kernels).
ACCELERATOR_CHUNK = 2**26


def chunk_rows(x: torch.Tensor, width: int, cpu_budget: int = 2**16) -> int:
    """Rows per chunk for products over ``width`` columns: about ``cpu_budget``
    elements on a CPU (2^16: the chunk and its products stay in cache),
    :data:`ACCELERATOR_CHUNK` on an accelerator."""
    budget = cpu_budget if x.device.type == "cpu" else ACCELERATOR_CHUNK
    return max(256, budget // max(width, 1))


def rt_x(r: torch.Tensor, x, square: bool = False) -> torch.Tensor:
    """``r^T x`` (or ``r^T (x * x)`` with ``square``) for a dense ``r`` (n, m) and a
    dense ``x`` (n, d) or :class:`SparseRows`; dense products are summed over row
    chunks, so neither ``x * x`` nor a badly shaped ``(m x n) (n x d)`` product is
    formed whole."""
    if isinstance(x, SparseRows):
        return x.rt(r, square)
    n = x.shape[0]
    rows = chunk_rows(x, x.shape[1])
    if not square and (r.shape[1] == 1 or rows >= n):
        return r.T @ x
    out = torch.zeros(r.shape[1], x.shape[1], dtype=x.dtype, device=x.device)
    for i in range(0, n, rows):
        xc = x[i : i + rows]
        out.addmm_(r[i : i + rows].T, xc * xc if square else xc)
    return out
