"""Gaussian discriminant analysis (the lecture notes on probabilistic classification, §3 and §4;
Bishop PRML §4.2).

Every class is a Gaussian, ``p(x | C_k) = N(x | mu_k, Sigma_k)``, with either one
covariance shared by all classes (linear boundaries, LDA) or one per class
(quadratic boundaries, QDA). The maximum likelihood estimates are (the lecture notes, §4;
Bishop PRML §4.2.2)::

    pi_k = n_k / n,    mu_k = (1 / n_k) sum_{i in C_k} x_i,
    S_k = (1 / n_k) sum_{i in C_k} (x_i - mu_k)(x_i - mu_k)^T,
    Sigma = sum_k (n_k / n) S_k          (shared)   or   Sigma_k = S_k   (per class)

computed from the weighted class counts, means and centred scatter
``n_k S_k`` (:class:`~torchglm.models._moments.ClassMoments`: sums around a
per-class shift merged with Chan's formula, never ``E[x x^T] - mu mu^T``), in at
least the data's precision. Densities are evaluated at ``x - c`` with ``c`` the
mean of the class means (the posterior does not depend on ``c``), so a common
offset of the features costs no precision.

Two regularizations of scikit-learn's discriminant analysis are options here
(:class:`GaussianDiscriminantAnalysis`): Ledoit-Wolf shrinkage (``shrinkage="auto"``)
and a rank-revealing generalized inverse (``inverse="pinv"``, scikit-learn's
``solver="svd"``) for covariances that are singular.
"""

from __future__ import annotations


import numbers

import torch

from .._validation import NumericalWarning, fail, warn
from ._moments import ClassMoments
from .generative import LOG_2PI, GenerativeClassifier, log_det_and_factor

__all__ = [
    "GaussianDiscriminantAnalysis",
    "LinearDiscriminantAnalysis",
    "QuadraticDiscriminantAnalysis",
]

_COVARIANCES = ("shared", "per_class")
_INVERSES = ("cholesky", "pinv")


def _check_shrinkage(value) -> float | str:
    if isinstance(value, str):
        if value != "auto":
            raise fail("shrinkage", "'auto' (Ledoit-Wolf) or a number in [0, 1]", repr(value))
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= float(value) <= 1.0:
        raise fail("shrinkage", "'auto' (Ledoit-Wolf) or a number in [0, 1]", repr(value))
    return float(value)


def _standard_scale(cov: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """The standard deviations ``sqrt(diag cov)`` (..., d), 1 for a (near-)constant
    feature: a variance within the rounding of its computation (Chan, Golub &
    LeVeque 1983; scikit-learn's ``StandardScaler`` rule ``var <= n eps var``) or
    a standard deviation below ``10 eps``."""
    var = cov.diagonal(dim1=-2, dim2=-1).clamp_min(0)
    eps = torch.finfo(var.dtype).eps
    std = var.sqrt()
    constant = (var <= n.unsqueeze(-1) * eps * var) | (std < 10 * eps)
    return torch.where(constant, torch.ones_like(std), std)


def ledoit_wolf(cov: torch.Tensor, fourth: torch.Tensor, n: torch.Tensor):
    """Ledoit-Wolf shrinkage of each class's covariance, on standardized features.

    For one class with weighted count ``n``, covariance ``S`` (the MLE, divisor ``n``)
    and scales ``D = diag(sqrt(S_jj))`` (1 for a constant feature), the standardized
    covariance is ``R = D^-1 S D^-1`` and (Ledoit & Wolf, "A well-conditioned
    estimator for large-dimensional covariance matrices", J. Multivariate Anal. 88,
    2004, Lemma 3.2 and Theorem 3.1, with ``F = mu I``)::

        mu = tr(R) / d,        delta = |R - mu I|_F^2 / d,
        beta = (sum_i s_i |z_i|^4 / n - |R|_F^2) / (d n),    z_i = D^-1 (x_i - m),
        lambda = min(beta, delta) / delta   (0 when beta = 0 or d = 1),
        Sigma = D [(1 - lambda) R + lambda mu I] D = (1 - lambda) S + lambda mu D^2,

    scikit-learn's ``LinearDiscriminantAnalysis(shrinkage="auto")`` per class
    (``StandardScaler``, then ``sklearn.covariance.ledoit_wolf``, then rescaled).
    ``sum_i s_i |z_i|^4 = sum_jl F_jl / (D_j^2 D_l^2)`` comes from the centred
    co-fourth moments ``F`` (:class:`~torchglm.models._moments.ClassMoments`), so
    nothing is formed as ``E[x^2] - mu^2``. Sample weights count as repetitions.

    Args:
        cov: (K, d, d) class covariances ``S_k``.
        fourth: (K, d, d) ``F_k[j, l] = sum_{i in C_k} s_i (x_ij - m_kj)^2 (x_il - m_kl)^2``.
        n: (K,) weighted class counts.

    Returns:
        ``(Sigma (K, d, d), lambda (K,))``.
    """
    d = cov.shape[-1]
    scale = _standard_scale(cov, n)
    inv = 1 / scale
    R = cov * inv.unsqueeze(-1) * inv.unsqueeze(-2)
    eye = torch.eye(d, dtype=cov.dtype, device=cov.device)
    mu = R.diagonal(dim1=-2, dim2=-1).sum(-1) / d
    delta = (R - mu[:, None, None] * eye).square().sum((-2, -1)) / d
    inv2 = inv * inv
    quartic = (fourth * inv2.unsqueeze(-1) * inv2.unsqueeze(-2)).sum((-2, -1))
    beta = (quartic / n - R.square().sum((-2, -1))) / (d * n)
    beta = torch.minimum(beta.clamp_min(0), delta)
    lam = torch.where(
        beta > 0, beta / torch.where(delta > 0, delta, torch.ones_like(delta)), torch.zeros_like(beta)
    )
    if d == 1:
        lam = torch.zeros_like(lam)
    target = (mu.unsqueeze(-1) * scale * scale).diag_embed()
    return (1 - lam)[:, None, None] * cov + lam[:, None, None] * target, lam


def pinv_factor(cov: torch.Tensor, n: torch.Tensor, tol: float):
    """A rank-revealing generalized inverse of (a batch of) covariances, scale-free.

    With ``D = diag(sqrt(Sigma_jj))`` (1 for a constant feature) and the eigen
    decomposition of the standardized ``R = D^-1 Sigma D^-1 = V diag(s^2) V^T``, the
    directions with ``s <= tol`` are dropped (``s`` are the singular values of the
    standardized centred data ``(x_i - mu_k) D^-1 / sqrt(n)``, so ``tol`` is
    scikit-learn's ``LinearDiscriminantAnalysis(solver="svd", tol)``)::

        G = P P^T,   P = D^-1 V_r diag(1 / s_r),   Sigma = (D V_r diag(s_r)) (.)^T on the span,
        log pdet(Sigma) = 2 sum_j log D_j + sum_r log s_r^2,

    ``G`` is a reflexive generalized inverse (``Sigma G Sigma = Sigma``; Rao & Mitra,
    *Generalized Inverse of Matrices and Its Applications*, 1971, §2.5), and unlike
    the Moore-Penrose inverse it commutes with rescaling a feature, so the
    discriminant ``(x - mu_k)^T G (x - mu_k)`` is scale invariant. For a singular
    covariance the Gaussian is degenerate and lives on the span: directions without
    within-class variance are ignored (pseudo-inverse LDA, Raudys & Duin, "Expected
    classification error of the Fisher linear classifier with pseudo-inverse
    covariance matrix", Pattern Recognit. Lett. 19, 1998), instead of giving log-odds
    of order ``1 / jitter`` whose rounding no two sums of the same data share.

    Returns:
        ``(P, F, log_pdet, rank)``: ``P`` and the square-root factor
        ``F = D V_r diag(s_r)`` (..., d, d) with zero columns for the dropped
        directions, ``log pdet`` and the rank ``r`` (...,).
    """
    scale = _standard_scale(cov, n)
    inv = 1 / scale
    R = cov * inv.unsqueeze(-1) * inv.unsqueeze(-2)
    evals, V = torch.linalg.eigh(0.5 * (R + R.transpose(-1, -2)))
    keep = evals > tol * tol
    root = torch.where(keep, evals, torch.ones_like(evals)).sqrt()
    P = torch.where(keep.unsqueeze(-2), inv.unsqueeze(-1) * V / root.unsqueeze(-2), torch.zeros_like(V))
    F = torch.where(keep.unsqueeze(-2), scale.unsqueeze(-1) * V * root.unsqueeze(-2), torch.zeros_like(V))
    log_pdet = 2 * scale.log().sum(-1) + torch.where(keep, evals.log(), torch.zeros_like(evals)).sum(-1)
    return P, F, log_pdet, keep.sum(-1)


class GaussianDiscriminantAnalysis(GenerativeClassifier):
    """Gaussian class conditionals with a shared or per-class covariance.

    Shared covariance gives linear log-odds (the lecture notes, §3, binary case)::

        a(x) = log p(C_1|x)/p(C_0|x) = w^T x + w_0,   w = Sigma^{-1}(mu_1 - mu_0),
        w_0 = 1/2 (mu_0^T Sigma^{-1} mu_0 - mu_1^T Sigma^{-1} mu_1) + log pi_1 / pi_0

    (:meth:`to_linear` returns that model); per-class covariances give quadratic
    boundaries. Two regularizers make a singular covariance usable, applied in
    this order to each class's ``S_k`` (equivalently to the pooled ``Sigma``)::

        Sigma <- (1 - shrinkage) Sigma + shrinkage * (trace(Sigma) / d) I
        Sigma <- (1 - reg) Sigma + reg * I

    ``shrinkage`` is scikit-learn's ``shrinkage=float`` of
    ``LinearDiscriminantAnalysis`` (lsqr/eigen) and ``QuadraticDiscriminantAnalysis``
    (eigen), i.e. ``sklearn.covariance.shrunk_covariance``: towards the identity
    scaled by the mean variance. ``shrinkage="auto"`` shrinks each class's covariance
    ``S_k`` by its own Ledoit-Wolf intensity on standardized features (see
    :func:`ledoit_wolf`: towards ``mu_k diag(S_k)``), before pooling
    ``Sigma = sum_k (n_k / n) Sigma_k`` for LDA, as scikit-learn's ``shrinkage="auto"``
    does (scikit-learn pools with the class priors, which are ``n_k / n`` unless given).
    ``reg`` is ``QuadraticDiscriminantAnalysis(reg_param=...)``.

    ``inverse`` chooses how the covariance enters the density. ``"cholesky"``: its
    Cholesky factor; a covariance that is still not positive definite (fewer samples
    than features in a class, a constant feature) gets ``eps * mean(diag) * I``
    added with the smallest ``eps in {1e-10, ..., 1e-1}`` that works, and a
    :class:`NumericalWarning` (the log-odds are then of order ``1 / eps``).
    ``"pinv"``: the rank-revealing generalized inverse of :func:`pinv_factor`
    (scikit-learn's ``solver="svd"``): a singular covariance is a degenerate Gaussian
    on the span of the data, ``log p(x | C_k) = -1/2 [(x - mu_k)^T G_k (x - mu_k)
    + log pdet Sigma_k + r_k log 2 pi]`` with ``r_k`` its rank, and a
    :class:`NumericalWarning` says so. For a positive definite covariance both give
    the same model.

    Args:
        n_features: number of features ``d``.
        n_classes: number of classes ``K``.
        covariance: ``"shared"`` (LDA) or ``"per_class"`` (QDA).
        shrinkage: in [0, 1], shrinkage towards the mean variance times I, or
            ``"auto"``: Ledoit-Wolf per class on standardized features.
        reg: in [0, 1], shrinkage towards the identity.
        priors: fixed class priors, or ``None`` to fit ``pi_k = n_k / n``.
        dtype: dtype of the fitted statistics.
        inverse: ``"cholesky"`` or ``"pinv"`` (see above).
        tol: ``"pinv"`` drops standardized singular values ``<= tol``.

    Attributes:
        means: (K, d) class means ``mu_k``.
        covariance: (d, d) shared ``Sigma`` or (K, d, d) per-class ``Sigma_k``,
            after regularization.
        scale_tril: a factor ``F`` with ``F F^T = covariance``: its Cholesky factor
            (``"cholesky"``), or ``D V_r diag(s_r)`` (``"pinv"``, not triangular).
        log_det: ``log |Sigma|`` (``"pinv"``: the log pseudo-determinant).
        shrinkage_intensity: (K,) the shrinkage of each class's covariance (the
            Ledoit-Wolf estimates for ``"auto"``).
        pinv_factor, rank: ``P`` with ``G = P P^T`` and the rank(s) (``"pinv"`` only).

    Example:
        >>> gda = GaussianDiscriminantAnalysis(2, 2, covariance="shared")
        >>> x = torch.randn(100, 2); y = (x[:, 0] > 0).long()
        >>> result = gda.fit(x, y)
        >>> gda.predict_proba(x).shape
        torch.Size([100, 2])
    """

    def __init__(
        self,
        n_features: int,
        n_classes: int = 2,
        covariance: str = "shared",
        shrinkage: float | str = 0.0,
        reg: float = 0.0,
        priors=None,
        dtype: torch.dtype | None = None,
        inverse: str = "cholesky",
        tol: float = 1e-4,
    ):
        if covariance not in _COVARIANCES:
            raise fail("covariance", f"one of {list(_COVARIANCES)}", repr(covariance))
        if not 0.0 <= float(reg) <= 1.0:
            raise fail("reg", "a number in [0, 1]", reg)
        if inverse not in _INVERSES:
            raise fail("inverse", f"one of {list(_INVERSES)}", repr(inverse))
        if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not 0.0 <= float(tol) < float("inf"):
            raise fail("tol", "a finite number >= 0", repr(tol))
        self.covariance_type = covariance
        self.shrinkage = _check_shrinkage(shrinkage)
        self.reg = float(reg)
        self.inverse = inverse
        self.tol = float(tol)
        super().__init__(n_features, n_classes, priors, dtype)
        d, K = n_features, n_classes
        cov_shape = (d, d) if self.shared else (K, d, d)
        eye = torch.eye(d, dtype=self.dtype)
        self.register_buffer("means", torch.zeros(K, d, dtype=self.dtype))
        self.register_buffer("covariance", eye.expand(cov_shape).clone())
        self.register_buffer("scale_tril", eye.expand(cov_shape).clone())
        self.register_buffer("log_det", torch.zeros(cov_shape[:-2], dtype=self.dtype))
        self.register_buffer("shrinkage_intensity", torch.zeros(K, dtype=self.dtype))
        if inverse == "pinv":
            self.register_buffer("pinv_factor", eye.expand(cov_shape).clone())
            self.register_buffer("rank", torch.full(cov_shape[:-2], d, dtype=torch.long))

    @property
    def shared(self) -> bool:
        return self.covariance_type == "shared"

    @property
    def n_parameters(self) -> int:
        """``K d`` means + ``d(d+1)/2`` per covariance + ``K - 1`` priors (the lecture notes, §7):
        ``d(d+5)/2 + 1`` shared and ``d(d+3) + 1`` per class when ``K = 2``."""
        d, K = self.n_features, self.n_classes
        n_cov = 1 if self.shared else K
        return K * d + n_cov * d * (d + 1) // 2 + self._n_prior_parameters

    # -- sufficient statistics -----------------------------------------------
    @property
    def _moments_kind(self) -> str:
        # Sigma = (1/n) sum_k n_k S_k needs only the pooled within-class scatter,
        # unless each class is shrunk by its own Ledoit-Wolf intensity first.
        return "pooled" if self.shared and self.shrinkage != "auto" else "full"

    def _accumulator(self, dtype, device):
        return ClassMoments(
            self.n_classes,
            self.n_features,
            self._moments_kind,
            dtype,
            device,
            fourth=self.shrinkage == "auto",
        )

    def _finalize(self, stats, class_count):
        self._check_class_count(class_count)
        means, scatter = stats["means"], stats["scatter"]
        n = class_count.sum()
        intensity = torch.full_like(class_count, 0.0 if self.shrinkage == "auto" else self.shrinkage)
        if scatter.dim() == 3:
            cov = scatter / class_count[:, None, None]
            cov = 0.5 * (cov + cov.transpose(-1, -2))
            if self.shrinkage == "auto":
                cov, intensity = ledoit_wolf(cov, stats["fourth"], class_count)
            if self.shared:
                cov = (class_count[:, None, None] / n * cov).sum(0)
        else:
            cov = scatter / n
        cov = 0.5 * (cov + cov.transpose(-1, -2))
        eye = torch.eye(self.n_features, dtype=cov.dtype, device=cov.device)
        if self.shrinkage != "auto" and self.shrinkage:
            mean_var = cov.diagonal(dim1=-2, dim2=-1).mean(-1)[..., None, None]
            cov = (1 - self.shrinkage) * cov + self.shrinkage * mean_var * eye
        if self.reg:
            cov = (1 - self.reg) * cov + self.reg * eye
        if self.inverse == "pinv":
            P, L, log_det, rank = pinv_factor(cov, n if self.shared else class_count, self.tol)
            if bool((rank < self.n_features).any()):
                warn(
                    f"covariance is singular (rank {rank.tolist()} < {self.n_features} features: a constant "
                    f"feature, collinear features, or a class with no more samples than features): the "
                    f"densities live on the span of the data (generalized inverse, pseudo-determinant). "
                    f"Set shrinkage or reg to regularize instead.",
                    NumericalWarning,
                )
            self.pinv_factor.copy_(P)
            self.rank.copy_(rank)
        else:
            cov, L, log_det, eps = log_det_and_factor(cov, "covariance")
            if eps > 0:
                warn(
                    f"covariance is singular (a constant feature, collinear features, or a class with "
                    f"no more samples than the {self.n_features} features; class counts "
                    f"{[round(float(c), 6) for c in class_count]}): added {eps:g} x mean variance to "
                    f"the diagonal. Set shrinkage or reg to choose the regularization yourself.",
                    NumericalWarning,
                )
        self.means.copy_(means)
        self.covariance.copy_(cov)
        self.scale_tril.copy_(L)
        self.log_det.copy_(log_det)
        self.shrinkage_intensity.copy_(intensity)
        self._set_fitted(class_count)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # A checkpoint written before ``shrinkage="auto"`` holds no intensities: its
        # covariances were shrunk by the fixed ``shrinkage`` (0: not at all), which is
        # each class's intensity.
        key = prefix + "shrinkage_intensity"
        if key not in state_dict and self.shrinkage != "auto":
            state_dict[key] = torch.full_like(self.shrinkage_intensity, float(self.shrinkage))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # -- densities -------------------------------------------------------------
    def _whitened(self, x):
        """``z = L^{-1}(x - c)`` (d, n) and ``m_k = L^{-1}(mu_k - c)`` (d, K), ``c`` the
        mean of the class means: one triangular solve for all classes (shared Sigma)."""
        c = self.means.mean(0)
        if self.inverse == "pinv":  # z = P^T (x - c), so |z - m_k|^2 = (x - mu_k)^T G (x - mu_k)
            return self.pinv_factor.T @ (x - c).T, self.pinv_factor.T @ (self.means - c).T
        z = torch.linalg.solve_triangular(self.scale_tril, (x - c).T, upper=False)
        m = torch.linalg.solve_triangular(self.scale_tril, (self.means - c).T, upper=False)
        return z, m

    def class_log_likelihood(self, x):
        """``log N(x | mu_k, Sigma_k) = -1/2 (x-mu_k)^T Sigma_k^{-1} (x-mu_k) - 1/2 log|Sigma_k| - d/2 log 2 pi``."""
        d = self.n_features
        if self.shared:
            # |z - m_k|^2 = |z|^2 - 2 z^T m_k + |m_k|^2 (x and mu_k centred at c, so
            # |z| is not inflated by an offset common to all features).
            z, m = self._whitened(x)
            maha = (z * z).sum(0).unsqueeze(1) - 2 * (z.T @ m) + (m * m).sum(0)
        else:
            diff = x.unsqueeze(1) - self.means.unsqueeze(0)  # (n, K, d)
            if self.inverse == "pinv":
                z = self.pinv_factor.transpose(-1, -2) @ diff.permute(1, 2, 0)
            else:
                z = torch.linalg.solve_triangular(self.scale_tril, diff.permute(1, 2, 0), upper=False)
            maha = (z * z).sum(1).T
        # a degenerate Gaussian's density is on its r-dimensional span
        dim = self.rank.to(maha.dtype) if self.inverse == "pinv" else d
        return -0.5 * (maha + self.log_det + dim * LOG_2PI)

    def relative_log_likelihood(self, x):
        """Shared Sigma: ``z^T m_k - 1/2 |m_k|^2``, i.e. ``log N(x | mu_k, Sigma)`` without
        the class-shared ``-1/2 |z|^2 - 1/2 log|Sigma| - d/2 log 2 pi`` (the lecture notes, §3,
        ``a_k = w_k^T x + w_k0``): linear in ``x``, so no ``|x|^2`` swamps the
        differences between classes at large ``|x|``. Per-class Sigma_k: the full density."""
        if not self.shared:
            return self.class_log_likelihood(x)
        z, m = self._whitened(x)
        return z.T @ m - 0.5 * (m * m).sum(0)

    def _sample_features(self, y, generator):
        z = torch.randn(
            y.shape[0], self.n_features, generator=generator, dtype=self.dtype, device=self.means.device
        )
        L = self.scale_tril if self.shared else self.scale_tril[y]
        return self.means[y] + (L @ z.unsqueeze(-1)).squeeze(-1)

    def _linear_parameters(self):
        """``w_k = Sigma^{-1} mu_k``, ``w_k0 = -1/2 mu_k^T Sigma^{-1} mu_k`` (the
        ``x^T Sigma^{-1} x`` and ``log|Sigma|`` terms are shared by all classes)."""
        if not self.shared:
            raise NotImplementedError("QDA has quadratic log-odds: to_linear() needs covariance='shared'")
        if self.inverse == "pinv":  # G mu_k with G = P P^T; x^T G x is shared by the classes
            w = (self.means @ self.pinv_factor) @ self.pinv_factor.T
        else:
            w = torch.cholesky_solve(self.means.T, self.scale_tril).T  # (K, d)
        return w, -0.5 * (w * self.means).sum(1)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, covariance={self.covariance_type!r}, "
            f"shrinkage={self.shrinkage!r}, reg={self.reg}, inverse={self.inverse!r}, tol={self.tol}"
        )


class LinearDiscriminantAnalysis(GaussianDiscriminantAnalysis):
    """GDA with one covariance shared by all classes: linear boundaries (the lecture notes, §3)."""

    def __init__(
        self,
        n_features: int,
        n_classes: int = 2,
        shrinkage: float | str = 0.0,
        reg: float = 0.0,
        priors=None,
        dtype: torch.dtype | None = None,
        inverse: str = "cholesky",
        tol: float = 1e-4,
    ):
        super().__init__(n_features, n_classes, "shared", shrinkage, reg, priors, dtype, inverse, tol)


class QuadraticDiscriminantAnalysis(GaussianDiscriminantAnalysis):
    """GDA with one covariance per class: quadratic boundaries (the lecture notes, §3)."""

    def __init__(
        self,
        n_features: int,
        n_classes: int = 2,
        shrinkage: float | str = 0.0,
        reg: float = 0.0,
        priors=None,
        dtype: torch.dtype | None = None,
        inverse: str = "cholesky",
        tol: float = 1e-4,
    ):
        super().__init__(n_features, n_classes, "per_class", shrinkage, reg, priors, dtype, inverse, tol)
