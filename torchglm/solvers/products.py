"""The matrix products of a pass: their precision and their row chunks.

A pass adds products ``X~^T [r X~]`` over the rows of each batch. On a CPU they run
over row chunks that stay in cache; on an accelerator over few large chunks. A
dense Hessian's products may run in a lower precision than the working dtype
(:data:`HESSIAN_PRECISIONS`, for a stage another stage verifies).
"""

from __future__ import annotations

import functools
from contextlib import contextmanager, nullcontext
from typing import NamedTuple

import torch

from .sparse_rows import SparseRows

__all__ = [
    "HESSIAN_PRECISIONS",
    "ACCELERATOR_CHUNK",
    "SlabProducts",
    "GEMV_MIN_ENTRIES",
    "GEMV_MIN_WIDTH",
    "FEW_ROWS_MAX",
    "FEW_ROWS_MAX_THREADS",
    "FEW_ROWS_MIN_FLOPS",
    "add_product",
    "add_rt_v",
    "addmm_few_rows",
    "few_rows_applies",
    "blas_threads",
    "chunk_rows",
    "fused_rows",
    "gemv_applies",
    "mv",
    "rt_x",
]


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
        # A small float64 Hessian's X~^T [h X~] (at most FEW_ROWS_MAX columns): OpenBLAS's
        # dgemm, held at one thread (:func:`addmm_few_rows`).
        addmm_few_rows(out, a, b, hold=True)


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
    # One column over chunks that :func:`add_rt_v` takes (a whole 1,046 x 500 slab of a
    # float32 pass: 5 against 17 ms a pass over 50,000 rows, one thread).
    one = r.shape[1] == 1 and gemv_applies(x)
    rows = chunk_rows(x, x.shape[1], cpu_budget=2**19 if one else 2**16)
    out = torch.zeros(r.shape[1], x.shape[1], dtype=x.dtype, device=x.device)
    for i in range(0, n, rows):
        xc = x[i : i + rows]
        if one:
            add_rt_v(out[0], xc * xc, r[i : i + rows, 0])
        else:
            out.addmm_(r[i : i + rows].T, xc * xc)
    return out


# -- one-column products of a dense batch on a CPU --------------------------------------
#: Narrowest rows whose one-column products run through scipy's BLAS (:func:`mv`):
#: below it torch's ran about as fast (one thread, a slab pass ``x w`` then ``x^T r``
#: in float32: 200,000 x 50 2.7 against 2.6 ms, 500,000 x 30 4.2 against 3.7 ms), and
#: whole fits at 200,000 x 50 (logit, probit) were up to 6% slower through scipy.
GEMV_MIN_WIDTH = 64
#: Fewest entries of a batch (or slab) whose one-column products run through scipy's
#: BLAS: a small fit's products stay torch's (no BLAS threads to set, its rounding kept).
GEMV_MIN_ENTRIES = 2**18


class _OpenBLAS(NamedTuple):
    gemv: dict  # {torch.float32: sgemv, torch.float64: dgemv}
    pools: list  # threadpoolctl's controllers of the OpenBLAS libraries loaded
    dgemm: object


@functools.cache
def _openblas() -> _OpenBLAS | None:
    """scipy's ``{dtype: gemv}``, the thread controls of the OpenBLAS libraries loaded and
    scipy's ``dgemm``, or ``None`` where scipy's BLAS is not OpenBLAS (a build on another
    BLAS keeps torch's products: the speed below is OpenBLAS's)."""
    try:
        import scipy

        name = scipy.__config__.CONFIG["Build Dependencies"]["blas"]["name"]
        from scipy.linalg import blas
        from threadpoolctl import ThreadpoolController
    except (ImportError, KeyError, AttributeError, TypeError):
        return None
    if "openblas" not in str(name).lower():
        return None
    pools = ThreadpoolController().select(internal_api="openblas").lib_controllers
    return _OpenBLAS({torch.float32: blas.sgemv, torch.float64: blas.dgemv}, pools, blas.dgemm)


def gemv_applies(x) -> bool:
    """Whether :func:`mv` and :func:`add_rt_v` run ``x``'s products through scipy's BLAS."""
    return _gemv(x) is not None


def _gemv(x):
    """scipy's gemv for ``x``'s dtype where ``x`` is a contiguous CPU float32/float64
    matrix of at least :data:`GEMV_MIN_WIDTH` columns and :data:`GEMV_MIN_ENTRIES`
    entries outside autograd, else ``None``."""
    if (
        not isinstance(x, torch.Tensor)
        or x.numel() < GEMV_MIN_ENTRIES  # first: a small fit's batches stop here
        or x.layout != torch.strided
        or x.device.type != "cpu"
        or x.dim() != 2
        or x.shape[1] < GEMV_MIN_WIDTH
        or x.dtype not in (torch.float32, torch.float64)
        or x.requires_grad
        or not x.is_contiguous()
    ):
        return None
    blas = _openblas()
    return None if blas is None else blas.gemv[x.dtype]


# -- products of few rows of a small dense batch on a CPU, float64 -----------------------
#: Most rows of the left factor ``a`` of ``a @ b`` that :func:`addmm_few_rows` runs through
#: OpenBLAS's dgemm.
FEW_ROWS_MAX = 32
#: Fewest multiply-adds ``m k n`` of such a product: below it (a binary breast_cancer
#: fit's 1 x 30 x 455) torch's took as long, and a tiny fit keeps its rounding.
FEW_ROWS_MIN_FLOPS = 2**18
#: Most torch threads at which such a product runs through OpenBLAS (held at one thread):
#: with torch on two, MKL's products on both were the faster (``bench/few_rows.py``).
FEW_ROWS_MAX_THREADS = 1


def few_rows_applies(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether :func:`addmm_few_rows` runs ``a @ b`` (``a`` (m, k), ``b`` (k, n)) through
    scipy's OpenBLAS dgemm: float64 CPU matrices outside autograd, ``b`` contiguous and
    ``a`` contiguous or the transpose of a contiguous one (a Hessian's ``X~^T``), ``m``
    at most :data:`FEW_ROWS_MAX`, ``m k n`` at least :data:`FEW_ROWS_MIN_FLOPS`, torch on
    at most :data:`FEW_ROWS_MAX_THREADS` threads, and scipy's BLAS OpenBLAS."""
    return (
        a.dtype == b.dtype == torch.float64
        and torch.get_num_threads() <= FEW_ROWS_MAX_THREADS
        and a.dim() == b.dim() == 2
        and a.shape[0] <= FEW_ROWS_MAX
        and a.shape[0] * a.shape[1] * b.shape[1] >= FEW_ROWS_MIN_FLOPS
        and a.device.type == b.device.type == "cpu"
        and a.layout == b.layout == torch.strided
        and not (a.requires_grad or b.requires_grad)
        and (a.is_contiguous() or a.T.is_contiguous())
        and b.is_contiguous()
        and _openblas() is not None
    )


def addmm_few_rows(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, hold: bool = False) -> torch.Tensor:
    """``out += a @ b`` in place for ``a`` (m, k) of few rows and ``b`` (k, n): through
    scipy's OpenBLAS dgemm where :func:`few_rows_applies` (and ``out`` is a contiguous
    float64 matrix), else torch's ``addmm_``. On this project's AMD EPYC machine, one
    thread, MKL's float64 products with 3-10 rows ran 1.2-2x slower than OpenBLAS's
    (``bench/few_rows.py``: digits' Newton-CG products, 10 x 64 by 64 x 1,797, 87 against
    70 us, and 10 x 1,797 by 1,797 x 64, 114 against 84 us; 3 rows 47 against 29 and 61
    against 28; a tiny Newton fit's Hessian ``X~^T [h X~]``, 31 x 455 by 455 x 31, 48
    against 21 us); in float32 MKL's were the faster. Run under :func:`blas_threads`
    (OpenBLAS would thread such a product), or with ``hold`` held there for this
    product (3-7 us)."""
    if not (few_rows_applies(a, b) and out.dtype == torch.float64 and out.is_contiguous()):
        return out.addmm_(a, b)
    # C-ordered out = a b is the Fortran-ordered out^T = b^T a^T: no copies (an ``a``
    # that is the transpose of a contiguous matrix is Fortran-ordered as it is).
    an = a.numpy()
    transposed = not a.is_contiguous()
    # (a caller that holds it already enters no context here: hvp's 2 products a batch)
    with blas_threads(None, hold=True) if hold else nullcontext():
        _openblas().dgemm(
            1.0,
            b.numpy().T,
            an if transposed else an.T,
            beta=1.0,
            c=out.numpy().T,
            trans_b=transposed,
            overwrite_c=1,
        )
    return out


def mv(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """``x w + b`` (n,) for a dense ``x`` (n, d), ``w`` (d,) and a scalar ``b`` (a
    one-element tensor or ``None``). On a CPU, a batch :func:`gemv_applies` to runs as
    OpenBLAS's gemv through scipy (on this project's AMD EPYC machine, one thread,
    ``bench/pass_parts.py --problems 50k``: ``x w`` over a 50,000 x 500 pass's slabs 8.8
    against 11.6 ms through torch's MKL gemv in float32, 11.9 against 13.8 ms in float64;
    ``x.sum()`` 3.8 ms, so neither reads at the memory's bandwidth); elsewhere torch's
    ``addmv``."""
    gemv = _gemv(x) if w.dtype == x.dtype and not w.requires_grad else None
    if gemv is None:
        return x @ w if b is None else torch.addmv(b.to(x.dtype).reshape(()).expand(x.shape[0]), x, w)
    eta = torch.from_numpy(gemv(1.0, x.numpy().T, w.contiguous().numpy(), trans=1))
    return eta if b is None else eta.add_(b.reshape(()))


def add_rt_v(out: torch.Tensor, x: torch.Tensor, r: torch.Tensor) -> None:
    """``out += x^T r`` for a dense ``x`` (n, d) and ``r`` (n,), through scipy's gemv
    where :func:`mv` takes it, else torch's ``addmv_``."""
    gemv = _gemv(x) if r.dtype == x.dtype == out.dtype and not r.requires_grad else None
    if gemv is None:
        out.addmv_(x.T, r)
    elif out.is_contiguous():
        gemv(1.0, x.numpy().T, r.contiguous().numpy(), beta=1.0, y=out.numpy(), overwrite_y=1)
    else:
        out.add_(torch.from_numpy(gemv(1.0, x.numpy().T, r.contiguous().numpy())))


class SlabProducts:
    """A one-output pass's two products over the row slabs ``i:j`` of one dense batch
    ``x`` (:meth:`~.pass_sums.PassSums._add_slabs`): ``eta += x[i:j] w`` into a
    contiguous ``eta`` (j - i,) and ``grad += x[i:j]^T r``, of ``x``'s dtype. Where
    :func:`gemv_applies` to the batch they run as scipy's gemv on NumPy views of ``x``,
    ``w`` and ``grad`` made once a batch (``y`` overwritten in place): per slab views
    and checks cost a 50,000 x 500 pass's 48 slabs 0.4 (float32) to 1.0 ms (float64)
    of 12 and 20, one thread. Elsewhere torch's ``addmv_``."""

    def __init__(self, x: torch.Tensor, w: torch.Tensor, grad: torch.Tensor):
        self.x, self.w, self.grad = x, w, grad
        same = w.dtype == grad.dtype == x.dtype and grad.is_contiguous()
        self.gemv = _gemv(x) if same else None
        if self.gemv is not None:
            self.xn, self.wn, self.gn = x.numpy(), w.contiguous().numpy(), grad.numpy()

    def add_eta(self, i: int, j: int, eta: torch.Tensor) -> None:
        """``eta += x[i:j] w``."""
        if self.gemv is None or eta.dtype != self.x.dtype or not eta.is_contiguous():
            eta.addmv_(self.x[i:j], self.w)
        else:
            self.gemv(1.0, self.xn[i:j].T, self.wn, beta=1.0, y=eta.numpy(), overwrite_y=1, trans=1)

    def add_gradient(self, i: int, j: int, r: torch.Tensor) -> None:
        """``grad += x[i:j]^T r`` for ``r`` (j - i,)."""
        if self.gemv is None:
            self.grad.addmv_(self.x[i:j].T, r)
        else:
            self.gemv(1.0, self.xn[i:j].T, r.contiguous().numpy(), beta=1.0, y=self.gn, overwrite_y=1)


@contextmanager
def blas_threads(x, hold: bool | None = None):
    """OpenBLAS kept to one thread while a batch ``x`` whose products :func:`mv` takes
    (:func:`gemv_applies`, its slabs of :func:`fused_rows` too) is added or multiplied,
    and restored after; nothing is set for any other batch. OpenBLAS starts with one
    thread per core, and its pool would run beside torch's (:mod:`torchglm.threads`
    sizes torch's only); its gemv runs on one thread, as torch's MKL gemv does, and the
    pass's other operations keep torch's threads. ``hold``: whether to hold it whatever
    ``x`` (the products of :func:`addmm_few_rows`); ``None``: where :func:`gemv_applies`."""
    hold = gemv_applies(x) if hold is None else hold and _openblas() is not None
    pools = _openblas().pools if hold else ()
    changed = [(pool, n) for pool in pools if (n := pool.get_num_threads()) != 1]
    for pool, _ in changed:
        pool.set_num_threads(1)
    try:
        yield
    finally:
        for pool, n in changed:
            pool.set_num_threads(n)
