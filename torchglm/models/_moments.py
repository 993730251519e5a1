"""Per-class weighted means and centred scatter matrices, exact for any batch split.

The Gaussian MLE (the lecture notes on probabilistic classification, §4; Bishop PRML §4.2.2) needs
``mu_k = (1/n_k) sum_{i in C_k} x_i`` and ``S_k = (1/n_k) sum (x_i - mu_k)(x_i - mu_k)^T``.
The one-pass textbook form ``sum x x^T / n_k - mu_k mu_k^T`` cancels catastrophically
when ``|mu| >> sigma`` (relative error ``eps (|mu| / sigma)^2``: all of it in float32
at an offset of 1e4). Here every batch is summed around a per-class shift ``c_k``,
the weighted class mean of the first batch holding class ``k``::

    s1_k = sum_i r_ik (x_i - c_k),      s2_k = sum_i r_ik (x_i - c_k)(x_i - c_k)^T

which are plain sums (batch order and split do not matter beyond rounding) and lose
only ``eps (|mu_k - c_k| / sigma)^2``. At the end of the pass each process centres
them at its own class mean, ``M2_k = s2_k - s1_k s1_k^T / n_k``, and processes are
merged with Chan et al.'s pairwise formula written as two all-reduced sums::

    mu_k = sum_p n_pk m_pk / n_k,      M2_k = sum_p [M2_pk + n_pk (m_pk - mu_k)(m_pk - mu_k)^T]

(Chan, Golub & LeVeque, "Algorithms for computing the sample variance", 1983), so
every process gets the same statistics as one process holding all the rows.

With ``fourth=True`` (per-class layout only) the pass also sums the shifted fourth-order
products ``sum_i r_ik u_ij^2 u_il^2`` and ``sum_i r_ik u_ij^2 u_il`` (``u = x - c_k``), and
:meth:`ClassMoments.reduce` returns the centred co-fourth moments
``F_k[j, l] = sum_{i in C_k} s_i (x_ij - mu_kj)^2 (x_il - mu_kl)^2``. Re-centring a
power sum from ``c`` to ``mu = c + delta`` is the exact binomial identity
(Pébay, "Formulas for robust, one-pass parallel computation of covariances and
arbitrary-order statistical moments", Sandia report SAND2008-6212)::

    F[j,l] = sum s (u_j - d_j)^2 (u_l - d_l)^2
           = M22[j,l] - 2 d_l M21[j,l] - 2 d_j M21[l,j] + d_l^2 Q_j + d_j^2 Q_l
             + 4 d_j d_l M11[j,l] - 2 d_j d_l^2 S_j - 2 d_j^2 d_l S_l + n d_j^2 d_l^2

(``M21[j,l] = sum s u_j^2 u_l``, ``M11`` the shifted scatter, ``Q`` its diagonal,
``S`` the shifted sum), applied by each process about the merged mean before the
all-reduce; the shift keeps ``|delta|`` near 0, so nothing cancels. Ledoit-Wolf
shrinkage needs them (:mod:`torchglm.models.discriminant`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..passes import all_reduce_sum

__all__ = ["ClassMoments", "SumStatistics", "agree_dtype"]

#: how the second moments are kept: per (class, feature), per class, or pooled over classes.
KINDS = ("diagonal", "full", "pooled")

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _world_size() -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def agree_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The widest of every process's accumulation dtype (``dtype`` on one process).

    A process whose shard held float64 rows accumulates in float64, one with no
    rows in the model's dtype: all must all-reduce tensors of one dtype.
    """
    if _world_size() == 1:
        return dtype
    present = torch.tensor([float(dtype == d) for d in _DTYPES], device=device)
    dist.all_reduce(present, op=dist.ReduceOp.MAX)
    out = dtype
    for d, flag in zip(_DTYPES, present.tolist()):
        if flag:
            out = torch.promote_types(out, d)
    return out


class SumStatistics:
    """Per-class sums ``n_k`` and the model's ``_batch_statistics``, all-reduced by summing.

    Args:
        shapes: ``{name: shape}`` of the model's per-class sums.
        batch_statistics: ``(x, r) -> {name: sum}`` for one batch.
    """

    def __init__(self, n_classes: int, shapes: dict, batch_statistics, dtype, device):
        self.batch_statistics = batch_statistics
        self.stats = {"class_count": torch.zeros(n_classes, dtype=dtype, device=device)}
        for name, shape in shapes.items():
            self.stats[name] = torch.zeros(shape, dtype=dtype, device=device)

    @property
    def dtype(self) -> torch.dtype:
        return self.stats["class_count"].dtype

    def to(self, dtype: torch.dtype) -> None:
        self.stats = {k: v.to(dtype) for k, v in self.stats.items()}

    def add(self, x: torch.Tensor, y: torch.Tensor, r: torch.Tensor) -> None:
        self.stats["class_count"] += r.sum(dim=0)
        for name, value in self.batch_statistics(x, r).items():
            self.stats[name] += value

    def reduce(self) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        all_reduce_sum(*self.stats.values())
        stats = dict(self.stats)
        return stats, stats.pop("class_count")


class ClassMoments:
    """Weighted class counts, means and centred scatter, accumulated around shifts.

    Args:
        n_classes: ``K``.
        n_features: ``d``.
        kind: ``"diagonal"`` (scatter (K, d): per-feature sums of squares, naive
            Bayes), ``"full"`` ((K, d, d), QDA) or ``"pooled"`` ((d, d), the
            within-class scatter summed over classes, LDA).
        fourth: with ``"full"``, also the centred co-fourth moments (see the module doc),
            returned as ``stats["fourth"]`` (K, d, d).

    :meth:`reduce` returns ``({"means": (K, d), "scatter": ...}, n_k)`` with
    ``scatter = sum_{i in C_k} s_i (x_i - mu_k)(x_i - mu_k)^T`` (not divided by ``n_k``).
    """

    def __init__(self, n_classes: int, n_features: int, kind: str, dtype, device, fourth: bool = False):
        if kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")
        if fourth and kind != "full":
            raise ValueError("fourth: the fourth-order sums need kind='full'")
        K, d = n_classes, n_features
        self.kind = kind
        self.fourth = fourth
        z = {"dtype": dtype, "device": device}
        self.count = torch.zeros(K, **z)
        self.shift = torch.zeros(K, d, **z)
        self.seen = torch.zeros(K, dtype=torch.bool, device=device)
        self.s1 = torch.zeros(K, d, **z)
        shape = {"diagonal": (K, d), "full": (K, d, d), "pooled": (d, d)}[kind]
        self.s2 = torch.zeros(shape, **z)
        if fourth:
            self.m22 = torch.zeros(K, d, d, **z)
            self.m21 = torch.zeros(K, d, d, **z)

    @property
    def dtype(self) -> torch.dtype:
        return self.count.dtype

    def to(self, dtype: torch.dtype) -> None:
        for name in ("count", "shift", "s1", "s2") + (("m22", "m21") if self.fourth else ()):
            setattr(self, name, getattr(self, name).to(dtype))

    def add(self, x: torch.Tensor, y: torch.Tensor, r: torch.Tensor) -> None:
        """Add one batch: ``x`` (n, d), labels ``y`` (n,), ``r`` (n, K) = ``s_i t_ik``."""
        n_b = r.sum(dim=0)
        new = (n_b > 0) & ~self.seen
        # The shift only has to be near mu_k; this batch's class mean is. (No branch on
        # `new`: that would synchronize with the device on every batch.)
        batch_mean = (r.T @ x) / n_b.clamp_min(torch.finfo(n_b.dtype).tiny).unsqueeze(1)
        self.shift = torch.where(new.unsqueeze(1), batch_mean, self.shift)
        self.seen |= new
        diff = x - self.shift[y]
        self.count += n_b
        self.s1 += r.T @ diff
        if self.kind == "diagonal":
            self.s2 += r.T @ (diff * diff)
        elif self.kind == "full":
            self.s2 += torch.einsum("nk,ni,nj->kij", r, diff, diff)
            if self.fourth:
                sq = diff * diff
                self.m22 += torch.einsum("nk,ni,nj->kij", r, sq, sq)
                self.m21 += torch.einsum("nk,ni,nj->kij", r, sq, diff)
        else:
            self.s2 += (diff * r.sum(dim=1, keepdim=True)).T @ diff

    def _centre(self, s1: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """``sum_k s1_k s1_k^T / n_k`` in the scatter's layout (0 for empty classes)."""
        inv = torch.where(n > 0, 1 / n.clamp_min(torch.finfo(n.dtype).tiny), torch.zeros_like(n))
        if self.kind == "diagonal":
            return s1 * s1 * inv.unsqueeze(1)
        outer = s1.unsqueeze(2) * s1.unsqueeze(1) * inv[:, None, None]
        return outer if self.kind == "full" else outer.sum(0)

    def reduce(self) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Centre at each process's class means, then merge processes (Chan); see the module doc."""
        n, s1 = self.count, self.s1
        present = (n > 0).unsqueeze(1)
        local_mean = torch.where(
            present,
            self.shift + s1 / n.clamp_min(torch.finfo(n.dtype).tiny).unsqueeze(1),
            torch.zeros_like(s1),
        )
        scatter = self.s2 - self._centre(s1, n)
        if _world_size() == 1:
            stats = {"means": local_mean, "scatter": scatter}
            if self.fourth:
                stats["fourth"] = self._fourth_about(local_mean)
            return stats, n.clone()
        total = n.clone()
        sum_x = local_mean * n.unsqueeze(1)
        all_reduce_sum(total, sum_x)
        means = sum_x / total.clamp_min(torch.finfo(n.dtype).tiny).unsqueeze(1)
        delta = torch.where(present, local_mean - means, torch.zeros_like(means))
        # n_pk (m_pk - mu_k)(m_pk - mu_k)^T, in the scatter's layout: _centre(n * delta, n).
        scatter = scatter + self._centre(delta * n.unsqueeze(1), n)
        all_reduce_sum(scatter)
        stats = {"means": means, "scatter": scatter}
        if self.fourth:
            fourth = self._fourth_about(means)
            all_reduce_sum(fourth)
            stats["fourth"] = fourth
        return stats, total

    def _fourth_about(self, centre: torch.Tensor) -> torch.Tensor:
        """This process's ``sum_i r_ik (x_ij - a_kj)^2 (x_il - a_kl)^2`` about ``a = centre``
        (K, d), from the sums about the shifts (the identity in the module doc)."""
        # A class with no rows here has all sums 0, whatever d is.
        d = torch.where((self.count > 0).unsqueeze(1), centre - self.shift, torch.zeros_like(centre))
        n, S, M11 = self.count, self.s1, self.s2
        Q = M11.diagonal(dim1=-2, dim2=-1)
        dj, dl = d.unsqueeze(2), d.unsqueeze(1)  # (K, d, 1), (K, 1, d): index j, index l
        Sj, Sl = S.unsqueeze(2), S.unsqueeze(1)
        return (
            self.m22
            - 2 * dl * self.m21
            - 2 * dj * self.m21.transpose(1, 2)
            + dl * dl * Q.unsqueeze(2)
            + dj * dj * Q.unsqueeze(1)
            + 4 * dj * dl * M11
            - 2 * dj * dl * dl * Sj
            - 2 * dj * dj * dl * Sl
            + n[:, None, None] * (dj * dj) * (dl * dl)
        )
