"""The flat parameter layout the solvers work in.

**Parameter order.** Every flat vector or matrix of the solvers is ordered like
``torch.cat([model.coef.reshape(-1), model.intercept])``: the weight
rows (output ``k``, feature ``j`` at index ``k * n_features + j``), then the
biases (index ``n_outputs * n_features + k``). :func:`parameter_names` names them.
The model owns the layout (:class:`~torchglm.passes.LinearModel`); these functions
read it.
"""

from __future__ import annotations

import torch

from ..passes import LinearModel

__all__ = ["flat_parameters", "set_flat_parameters", "parameter_names", "hessian_cost", "penalty_mask"]


def flat_parameters(model: LinearModel, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``[W.reshape(-1), b]`` as one detached vector (a copy), in ``dtype`` (the
    model's :meth:`~torchglm.models.GeneralizedLinearModel.flat_parameters`)."""
    return model.flat_parameters(dtype)


def set_flat_parameters(model: LinearModel, theta: torch.Tensor) -> None:
    """Write a flat ``[W.reshape(-1), b]`` vector into the model (in its dtype; the
    model's :meth:`~torchglm.models.GeneralizedLinearModel.set_flat_parameters`)."""
    model.set_flat_parameters(theta)


def parameter_names(model: LinearModel) -> list[str]:
    """Names of the flat parameters: ``weight[k,j]`` then ``bias[k]`` (the model's
    :meth:`~torchglm.models.GeneralizedLinearModel.parameter_names`)."""
    return model.parameter_names()


def hessian_cost(model: LinearModel) -> float:
    """Hessian entries per sample, ``d~ K (K + 1) / 2`` (``d~`` for one output): the
    cost of one exact-Hessian pass in units of one gradient evaluation."""
    m, d = model.n_outputs, model.n_features
    dt = d + model.has_intercept
    return dt * m * (m + 1) / 2 if m > 1 else dt


def penalty_mask(model: LinearModel, dtype=None, device=None) -> torch.Tensor:
    """1 for penalized (weight) entries, 0 for the bias, in the flat order."""
    m, d = model.n_outputs, model.n_features
    n_bias = model.n_bias
    return torch.cat(
        [torch.ones(m * d, dtype=dtype, device=device), torch.zeros(n_bias, dtype=dtype, device=device)]
    )
