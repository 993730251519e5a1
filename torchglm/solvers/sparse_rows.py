"""Sparse batches in CSR, with the transposes a pass's products need cached."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["SparseRows", "cast_values"]


#: A batch of at most this many stored entries keeps its squared values for the
#: diagonal's products (:meth:`SparseRows.rt`; 16 MB in float64): a larger one squares
#: them a row block at a time, so that a fit's memory stays near the CSR's own.
SQUARES_KEPT_MAX = 2**21


class SparseRows:
    """A sparse batch of rows for the products of a pass, kept in CSR.

    ``x @ W^T`` is a CSR product. The products back onto ``x`` (gradient ``x^T r``,
    diagonal ``(x * x)^T h``, Hessian-vector products, :meth:`rt`) run, on a CPU, as
    scipy's CSR-transpose product over the same arrays (a scatter by column, no copy
    of ``x``); elsewhere through a CSR of ``x^T`` (and of ``(x * x)^T`` when asked),
    built once and kept in ``cache`` (the fitter's dict) for the later passes over
    the same batch. Measured on a 25,000 x 10,000 design with 150 entries per row
    (one thread), ``x^T r`` takes 4.8 ms through scipy and 4.7 ms as a CSR of
    ``x^T`` (whose build, a stable argsort, took 120-270 ms and as much memory as
    ``x``), 220 ms through COO and 380 ms as torch's transposed CSR. A batch is
    known again by its column-index and value storage (the contiguous row slices of
    :class:`~torchglm.data.batches.TensorBatches` are views); the entry holds those
    tensors, so their memory cannot be reused while it lives, and lives while the
    passes use it (:meth:`evict_unseen`). The Hessian of a sparse design (small
    ``d``) is formed from the COO form.
    """

    is_sparse = True

    def __init__(self, csr: torch.Tensor, entry: dict):
        self.csr, self.entry = csr, entry
        self.shape, self.dtype, self.device = csr.shape, csr.dtype, csr.device

    @classmethod
    def of(cls, x: torch.Tensor, cache: dict | None, dtype: torch.dtype) -> "SparseRows":
        """The batch ``x`` as given (CSR or COO, any dtype) in CSR and ``dtype``; the
        conversion too is kept in ``cache`` with the transposes (a float32 batch of a
        float64 fit is cast once, not every pass)."""
        sparse_csr = x.layout == torch.sparse_csr
        parts = (x.col_indices(), x.values(), x.crow_indices()) if sparse_csr else (x._indices(), x._values())
        key = (
            x.layout,
            parts[0].data_ptr(),
            parts[1].data_ptr(),
            parts[1].numel(),
            tuple(x.shape),
            x.dtype,
            dtype,
            str(x.device),
        )
        entry = None if cache is None else cache.get(key)
        if entry is None:
            csr = x if sparse_csr else x.to_sparse_csr()
            entry = {"pinned": parts, "csr": cast_values(csr, dtype)}
            if cache is not None:
                cache[key] = entry
        entry["seen"] = True
        return cls(entry["csr"], entry)

    @staticmethod
    def evict_unseen(cache: dict) -> None:
        """Drop the entries no batch of the last pass used (shuffled batches are new
        tensors every pass: without this the cache would grow by a pass's batches per
        pass), and start watching the next pass."""
        for key in [k for k, e in cache.items() if not e.get("seen")]:
            del cache[key]
        for e in cache.values():
            e["seen"] = False

    def __matmul__(self, w: torch.Tensor) -> torch.Tensor:
        """``x @ w`` for a dense ``w`` (d, m). One column on a CPU runs as scipy's CSR
        product over the same arrays (25,000 x 10,000, 150 entries a row, one thread:
        3.8 against 4.3 ms in float32, 5.3 against 6.3 ms in float64 through torch's
        CSR); several columns stay torch's (scipy's several-vector kernel ran 3x
        slower at two)."""
        host = None if w.dim() != 2 or w.shape[1] != 1 or w.requires_grad else self.scipy_view(w.dtype)
        if host is None:
            return self.csr @ w
        return torch.from_numpy(host @ w.numpy().ravel()).unsqueeze(1)

    def rt(self, r: torch.Tensor, square: bool = False) -> torch.Tensor:
        """``r^T x`` (or ``r^T (x * x)``) for a dense ``r`` (n, m): shape (m, d)."""
        host = self.scipy_view(r.dtype)
        if host is None:
            return (self.transposed(square) @ r).T
        r_np = r.detach().numpy()
        if not square:
            return torch.from_numpy(host.T @ r_np).T
        import scipy.sparse as sp

        if host.nnz <= SQUARES_KEPT_MAX:
            # A small batch's squared values, made once and kept with its entry: every
            # Newton-CG pass of the 11,000 x 94,000 TF-IDF matrix (1.9 million entries)
            # squared them afresh, 5 of its 11 ms for the diagonal.
            if "scipy_square" not in self.entry:
                self.entry["scipy_square"] = sp.csr_matrix(
                    (host.data**2, host.indices, host.indptr), shape=host.shape, copy=False
                )
            return torch.from_numpy(self.entry["scipy_square"].T @ r_np).T
        # (x * x)^T h over row blocks: the squared values of one block at a time
        # (no second nnz-long array), about 2^20 stored entries each.
        n, d = host.shape
        out = torch.zeros(r.shape[1], d, dtype=r.dtype)
        block = max(1, (1 << 20) * n // max(host.nnz, 1))
        crow = host.indptr
        for i in range(0, n, block):
            j = min(i + block, n)
            lo, hi = crow[i], crow[j]
            part = sp.csr_matrix(  # views of the block's indices; its values squared
                (host.data[lo:hi] ** 2, host.indices[lo:hi], crow[i : j + 1] - lo),
                shape=(j - i, d),
                copy=False,
            )
            out += torch.from_numpy(part.T @ r_np[i:j]).T
        return out

    def scipy_view(self, dtype: torch.dtype):
        """The batch as a ``scipy.sparse.csr_matrix`` over the same arrays (cached), for
        the products back onto ``x`` on a CPU; ``None`` off the CPU or for a dtype
        scipy's kernels do not take with ``dtype`` vectors without casting."""
        csr = self.csr
        if csr.device.type != "cpu" or csr.dtype != dtype or dtype not in (torch.float32, torch.float64):
            return None
        if "scipy" not in self.entry:
            import scipy.sparse as sp  # a dependency; imported on first use only

            self.entry["scipy"] = sp.csr_matrix(
                (csr.values().numpy(), csr.col_indices().numpy(), csr.crow_indices().numpy()),
                shape=tuple(csr.shape),
                copy=False,
            )
        return self.entry["scipy"]

    def transposed(self, square: bool = False) -> torch.Tensor:
        """CSR of ``x^T`` (or of ``(x * x)^T``), built on first use."""
        if square:
            if "t_square" not in self.entry:
                t = self.transposed()  # the same pattern, squared values
                self.entry["t_square"] = torch.sparse_csr_tensor(
                    t.crow_indices(), t.col_indices(), t.values() ** 2, size=t.shape
                )
            return self.entry["t_square"]
        if "t" not in self.entry:
            csr = self.csr
            n, d = csr.shape
            col, values = csr.col_indices(), csr.values()
            rows = torch.repeat_interleave(torch.arange(n, device=col.device), csr.crow_indices().diff())
            order = torch.argsort(col, stable=True)  # by column, rows ascending within
            ccol = torch.zeros(d + 1, dtype=col.dtype, device=col.device)
            ccol[1:] = torch.bincount(col, minlength=d).cumsum(0)
            self.entry["t"] = torch.sparse_csr_tensor(
                ccol, rows[order].to(col.dtype), values[order], size=(d, n)
            )
        return self.entry["t"]

    @property
    def coo(self) -> torch.Tensor:
        if "coo" not in self.entry:
            self.entry["coo"] = self.csr.to_sparse_coo().coalesce()
        return self.entry["coo"]


def cast_values(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` with its values in ``dtype``; a sparse CSR shares its index arrays
    (``Tensor.to`` copies them too: half the CSR's bytes again with int32 indices, the
    whole of them with int64). A large dense CPU matrix is cast into a NumPy-allocated
    array (:func:`_numpy_buffer`)."""
    if x.layout == torch.strided and x.dtype != dtype:
        out = _numpy_buffer(x, dtype)
        return x.to(dtype) if out is None else out.copy_(x)
    if x.layout != torch.sparse_csr or x.dtype == dtype:
        return x.to(dtype)
    return torch.sparse_csr_tensor(
        x.crow_indices(), x.col_indices(), x.values().to(dtype), size=x.shape, check_invariants=False
    )


#: Dense casts of at least this many bytes go through :func:`_numpy_buffer` (one 2 MiB page).
NUMPY_BUFFER_MIN_BYTES = 1 << 21

_NUMPY_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}


def _numpy_buffer(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """An empty array shaped and ordered (C or Fortran) like the dense CPU matrix ``x``
    in ``dtype``, allocated by NumPy, or ``None`` where ``Tensor.to`` should cast (small,
    on a device, with autograd, another dtype or layout). NumPy advises the kernel to
    back its large arrays with transparent huge pages (``madvise``); torch's CPU
    allocator does not, and the fresh 4 KiB pages of a new cast fault one by one: a
    1,000,000 x 20 float64 design to float32 (one thread) took 47 ms through
    ``Tensor.to`` and 14 ms into NumPy's array (a float32 stage of ``auto`` casts its
    design once per fit)."""
    np_dtype = _NUMPY_DTYPES.get(dtype)
    if (
        np_dtype is None
        or x.device.type != "cpu"
        or x.requires_grad
        or x.dim() != 2
        or x.numel() * dtype.itemsize < NUMPY_BUFFER_MIN_BYTES
    ):
        return None
    if x.is_contiguous():
        order = "C"
    elif x.T.is_contiguous():
        order = "F"
    else:
        return None
    return torch.from_numpy(np.empty(tuple(x.shape), dtype=np_dtype, order=order))
