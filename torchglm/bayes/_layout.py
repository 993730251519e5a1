"""A GLM's coefficients as one flat vector ``theta = (vec W, b)``, the linear
predictor for one or many ``theta`` and the summed negative log-likelihood.

The order is the model's (:class:`~torchglm.models.GeneralizedLinearModel`): ``W`` has one row
per output (1 for binary models, ``K`` for softmax) flattened row by row, so
``theta[k * d + j] = W[k, j]``; the bias entries follow. Sums run over batches
(the library's pass contract), so the same code serves in-memory tensors and
batched data.
"""

from __future__ import annotations

import math
from typing import Iterable

import torch

from .._validation import fail
from ..data.batches import Batch, TensorBatches
from ..models.glm import GeneralizedLinearModel
from .prior import GaussianPrior

__all__ = [
    "GaussianDraws",
    "as_batches",
    "check_dispersion",
    "check_glm",
    "linear_predictor",
    "data_nll",
    "identified_basis",
]


class GaussianDraws:
    """Draws from a Gaussian posterior ``N(mean, scale scale^T)`` over ``theta``
    (shared by the Laplace and the variational posteriors)."""

    mean: torch.Tensor
    scale: torch.Tensor

    @property
    def dim(self) -> int:
        """``D``: the number of directions the posterior identifies."""
        return self.scale.shape[1]

    def sample(self, n_samples: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``n_samples`` draws ``theta = mean + F z``, ``z ~ N(0, I)``; shape (n_samples, p)."""
        z = torch.randn(n_samples, self.dim, generator=generator, dtype=self.mean.dtype)
        return self.mean + z.to(self.mean.device) @ self.scale.T


def check_model(model) -> GeneralizedLinearModel:
    if not isinstance(model, GeneralizedLinearModel) or not model.family.is_classifier:
        raise fail("model", "a GeneralizedLinearModel with a classification family", type(model).__name__)
    return model


def check_glm(model) -> GeneralizedLinearModel:
    """Any family: the Laplace posterior, its evidence and the choice of ``lambda`` by
    the evidence need only a likelihood and its curvature."""
    if not isinstance(model, GeneralizedLinearModel):
        raise fail("model", "a GeneralizedLinearModel", type(model).__name__)
    return model


def check_dispersion(model, dispersion) -> float:
    """The dispersion ``phi`` the likelihood is taken at: given (a positive number) for a
    family with one (Gaussian ``phi = 1 / beta``, Gamma ``1 / shape``), 1 otherwise."""
    if not model.family.has_dispersion:
        if dispersion is not None and float(dispersion) != 1.0:
            raise fail("dispersion", f"None (the {model.family.name} family has phi = 1)", dispersion)
        return 1.0
    if dispersion is None:
        raise fail(
            "dispersion",
            f"the {model.family.name} family's dispersion phi (a positive number; "
            "evidence_fixed_point estimates it)",
            None,
        )
    phi = float(dispersion)
    if not (math.isfinite(phi) and phi > 0):
        raise fail("dispersion", "a positive finite number", dispersion)
    return phi


def as_batches(data, model: GeneralizedLinearModel) -> Iterable[Batch]:
    """Accept ``(x, y)``, ``(x, y, weight)`` (validated against ``model``) or any
    re-iterable of :class:`~torchglm.data.batches.Batch` (validated by its producer)."""
    if isinstance(data, (tuple, list)) and 2 <= len(data) <= 3 and isinstance(data[0], torch.Tensor):
        x, y = data[0], data[1]
        weight = data[2] if len(data) == 3 else None
        x, y = model.check_data(x, y, weight)
        return TensorBatches(x, y, weight)
    if isinstance(data, torch.Tensor) or not hasattr(data, "__iter__"):
        raise fail("data", "(x, y), (x, y, weight) or a re-iterable of Batch", type(data).__name__)
    return data


def n_weights(model) -> int:
    return model.n_weights


def n_bias(model) -> int:
    return model.n_bias


def linear_predictor(
    model, theta: torch.Tensor, x: torch.Tensor, offset: torch.Tensor | None = None
) -> torch.Tensor:
    """``eta = x W^T + b (+ offset)`` for one ``theta`` (p,) or many (S, p): the model's
    :meth:`~torchglm.models.GeneralizedLinearModel.linear_predictor`.

    Returns shape ``(n,)``/``(n, K)`` for one ``theta`` and ``(S, n)``/``(S, n, K)``
    for a stack.
    """
    return model.linear_predictor(theta, x, offset)


def _batch_nll(model, theta, batch: Batch) -> torch.Tensor:
    nll = model.family.nll(linear_predictor(model, theta, batch.x, batch.offset), batch.y)
    return nll.sum() if batch.weight is None else (batch.weight * nll).sum()


def data_nll(model, theta: torch.Tensor, batches: Iterable[Batch]) -> torch.Tensor:
    """``-ln p(D | theta) = sum_i s_i nll(eta_i, y_i)`` (summed, not averaged)."""
    total = theta.new_zeros(())
    for batch in batches:
        total = total + _batch_nll(model, theta, batch)
    return total


def identified_basis(model, prior: GaussianPrior, like: torch.Tensor) -> torch.Tensor | None:
    """An orthonormal basis ``B`` (p, p-1) of the directions the posterior identifies,
    or ``None`` when it identifies all of them.

    Softmax probabilities are unchanged by ``b -> b + c 1``; with a flat bias prior
    that direction ``v = (0, 1_K / sqrt K)`` has zero posterior curvature and the
    posterior is improper along it. Every prediction is invariant to it, so the
    posterior is taken on the complement of ``v`` (equivalently: biases centred to
    sum to zero).
    """
    if not (model.family.multi_output and model.n_bias and prior.bias_variance is None):
        return None
    k = n_bias(model)
    m = n_weights(model)
    ones = torch.ones(k, 1, dtype=like.dtype, device=like.device)
    q, _ = torch.linalg.qr(
        torch.cat([ones, torch.eye(k, dtype=like.dtype, device=like.device)[:, : k - 1]], 1)
    )
    basis = torch.zeros(m + k, m + k - 1, dtype=like.dtype, device=like.device)
    basis[:m, :m] = torch.eye(m, dtype=like.dtype, device=like.device)
    basis[m:, m:] = q[:, 1:]
    return basis
