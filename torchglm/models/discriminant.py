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
"""

from __future__ import annotations


import torch

from .._validation import NumericalWarning, fail, warn
from .generative import LOG_2PI, GenerativeClassifier, log_det_and_factor

__all__ = [
    "GaussianDiscriminantAnalysis",
    "LinearDiscriminantAnalysis",
    "QuadraticDiscriminantAnalysis",
]

_COVARIANCES = ("shared", "per_class")


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
    scaled by the mean variance. ``reg`` is ``QuadraticDiscriminantAnalysis(reg_param=...)``. A covariance that is still
    not positive definite (fewer samples than features in a class, a constant
    feature) gets ``eps * mean(diag) * I`` added with the smallest
    ``eps in {1e-10, ..., 1e-1}`` that works, and a :class:`NumericalWarning`.

    Args:
        n_features: number of features ``d``.
        n_classes: number of classes ``K``.
        covariance: ``"shared"`` (LDA) or ``"per_class"`` (QDA).
        shrinkage: in [0, 1], shrinkage towards the mean variance times I.
        reg: in [0, 1], shrinkage towards the identity.
        priors: fixed class priors, or ``None`` to fit ``pi_k = n_k / n``.
        dtype: dtype of the fitted statistics.

    Attributes:
        means: (K, d) class means ``mu_k``.
        covariance: (d, d) shared ``Sigma`` or (K, d, d) per-class ``Sigma_k``,
            after regularization.
        scale_tril: Cholesky factor(s) of ``covariance``.

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
        shrinkage: float = 0.0,
        reg: float = 0.0,
        priors=None,
        dtype: torch.dtype | None = None,
    ):
        if covariance not in _COVARIANCES:
            raise fail("covariance", f"one of {list(_COVARIANCES)}", repr(covariance))
        for name, value in (("shrinkage", shrinkage), ("reg", reg)):
            if not 0.0 <= float(value) <= 1.0:
                raise fail(name, "a number in [0, 1]", value)
        self.covariance_type = covariance
        self.shrinkage = float(shrinkage)
        self.reg = float(reg)
        super().__init__(n_features, n_classes, priors, dtype)
        d, K = n_features, n_classes
        cov_shape = (d, d) if self.shared else (K, d, d)
        eye = torch.eye(d, dtype=self.dtype)
        self.register_buffer("means", torch.zeros(K, d, dtype=self.dtype))
        self.register_buffer("covariance", eye.expand(cov_shape).clone())
        self.register_buffer("scale_tril", eye.expand(cov_shape).clone())
        self.register_buffer("log_det", torch.zeros(cov_shape[:-2], dtype=self.dtype))

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
        # Sigma = (1/n) sum_k n_k S_k needs only the pooled within-class scatter.
        return "pooled" if self.shared else "full"

    def _finalize(self, stats, class_count):
        self._check_class_count(class_count)
        means, scatter = stats["means"], stats["scatter"]
        if self.shared:
            cov = scatter / class_count.sum()
        else:
            cov = scatter / class_count[:, None, None]
        cov = 0.5 * (cov + cov.transpose(-1, -2))
        eye = torch.eye(self.n_features, dtype=cov.dtype, device=cov.device)
        if self.shrinkage:
            mean_var = cov.diagonal(dim1=-2, dim2=-1).mean(-1)[..., None, None]
            cov = (1 - self.shrinkage) * cov + self.shrinkage * mean_var * eye
        if self.reg:
            cov = (1 - self.reg) * cov + self.reg * eye
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
        self._set_fitted(class_count)

    # -- densities -------------------------------------------------------------
    def _whitened(self, x):
        """``z = L^{-1}(x - c)`` (d, n) and ``m_k = L^{-1}(mu_k - c)`` (d, K), ``c`` the
        mean of the class means: one triangular solve for all classes (shared Sigma)."""
        c = self.means.mean(0)
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
            z = torch.linalg.solve_triangular(self.scale_tril, diff.permute(1, 2, 0), upper=False)
            maha = (z * z).sum(1).T
        return -0.5 * (maha + self.log_det + d * LOG_2PI)

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
        w = torch.cholesky_solve(self.means.T, self.scale_tril).T  # (K, d)
        return w, -0.5 * (w * self.means).sum(1)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, covariance={self.covariance_type!r}, "
            f"shrinkage={self.shrinkage}, reg={self.reg}"
        )


class LinearDiscriminantAnalysis(GaussianDiscriminantAnalysis):
    """GDA with one covariance shared by all classes: linear boundaries (the lecture notes, §3)."""

    def __init__(
        self,
        n_features: int,
        n_classes: int = 2,
        shrinkage: float = 0.0,
        reg: float = 0.0,
        priors=None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__(n_features, n_classes, "shared", shrinkage, reg, priors, dtype)


class QuadraticDiscriminantAnalysis(GaussianDiscriminantAnalysis):
    """GDA with one covariance per class: quadratic boundaries (the lecture notes, §3)."""

    def __init__(
        self,
        n_features: int,
        n_classes: int = 2,
        shrinkage: float = 0.0,
        reg: float = 0.0,
        priors=None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__(n_features, n_classes, "per_class", shrinkage, reg, priors, dtype)
