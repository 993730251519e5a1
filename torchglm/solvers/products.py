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


def fused_rows(x: torch.Tensor, outputs: int = 1) -> int | None:
    """Rows per slab of a pass over a dense design on a CPU, or ``None`` for one piece:
    sparse, on an accelerator, or small enough for cache. A slab holds about 2^19
    entries of ``x`` and of its ``eta`` (``outputs`` per row) together: with many
    classes ``eta``, ``mu`` and the kept curvature are the wider rows (at K = 1,000 a
    slab sized by ``x`` alone held 21 MB of ``eta`` in float32, and its passes and
    Hessian-vector products took 1.3-1.4x longer, one thread)."""
    width = x.shape[1] + outputs
    if x.is_sparse or x.device.type != "cpu" or x.shape[0] * width * x.element_size() <= 2**23:
        return None
    return chunk_rows(x, width, cpu_budget=2**19)


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
    dense ``x`` (n, d) or :class:`SparseRows`; ``r^T x`` is one matrix product (a pass
    gives it slabs of rows that stay in cache, :func:`fused_rows`: over chunks of 655
    rows it took 5x longer at m = 100), ``r^T (x * x)`` is summed over row chunks, so
    ``x * x`` is never formed whole."""
    if isinstance(x, SparseRows):
        return x.rt(r, square)
    if not square:
        return r.T @ x
    n = x.shape[0]
    rows = chunk_rows(x, x.shape[1])
    out = torch.zeros(r.shape[1], x.shape[1], dtype=x.dtype, device=x.device)
    for i in range(0, n, rows):
        xc = x[i : i + rows]
        out.addmm_(r[i : i + rows].T, xc * xc)
    return out
