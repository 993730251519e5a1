"""The GLM owns its parameter layout: one linear predictor for forward, inference and
the Bayesian code, and one list of coefficient names."""

import pytest
import torch

from torchglm import GeneralizedLinearModel, LogisticRegression, SoftmaxRegression
from torchglm.bayes._layout import linear_predictor as layout_linear_predictor
from torchglm import InputError
from torchglm.solvers import flat_parameters, parameter_names


def _random(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


@pytest.mark.parametrize(
    "make",
    [
        lambda: LogisticRegression(3, dtype=torch.float64),
        lambda: LogisticRegression(3, fit_intercept=False, dtype=torch.float64),
        lambda: SoftmaxRegression(3, 4, dtype=torch.float64),
        lambda: GeneralizedLinearModel(3, "poisson", dtype=torch.float64),
    ],
)
def test_linear_predictor_matches_forward_and_stacks(make):
    model = _random(make())
    x = torch.randn(7, 3, dtype=torch.float64)
    theta = flat_parameters(model)
    ref = x @ model.linear.weight.detach().T
    if model.linear.bias is not None:
        ref = ref + model.linear.bias.detach()
    if not model.family.multi_output:
        ref = ref.squeeze(-1)
    torch.testing.assert_close(model(x).detach(), ref, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(model.linear_predictor(theta, x), ref, rtol=1e-14, atol=1e-14)
    stack = torch.stack([theta, 2 * theta])
    eta = layout_linear_predictor(model, stack, x)
    assert eta.shape == (2, *ref.shape)
    torch.testing.assert_close(eta[1], 2 * ref, rtol=1e-13, atol=1e-13)
    offset = torch.randn(7, dtype=torch.float64)
    shifted = offset.unsqueeze(-1) if model.family.multi_output else offset
    torch.testing.assert_close(
        model.linear_predictor(theta, x, offset), ref + shifted, rtol=1e-14, atol=1e-14
    )
    assert model.n_weights + model.n_bias == theta.numel()


def test_parameter_names_in_the_flat_order():
    assert parameter_names(LogisticRegression(2)) == ["weight[0,0]", "weight[0,1]", "bias[0]"]
    assert LogisticRegression(2).parameter_names(["a", "b"]) == ["a", "b", "intercept"]
    assert LogisticRegression(2, fit_intercept=False).parameter_names(["a", "b"]) == ["a", "b"]
    assert SoftmaxRegression(2, 2).parameter_names(["a", "b"]) == [
        "0:a",
        "0:b",
        "1:a",
        "1:b",
        "0:intercept",
        "1:intercept",
    ]
    with pytest.raises(InputError, match="feature_names"):
        LogisticRegression(2).parameter_names(["a"])


def test_accessors_are_views_of_the_layout():
    """``coef``/``intercept`` are detached views (no copy), matching ``theta``'s order."""
    model = _random(SoftmaxRegression(3, 4, dtype=torch.float64))
    theta = flat_parameters(model)
    torch.testing.assert_close(torch.cat([model.coef.reshape(-1), model.intercept]), theta, rtol=0, atol=0)
    assert model.coef.data_ptr() == model.linear.weight.data_ptr() and not model.coef.requires_grad
    assert model.has_intercept and (model.n_outputs, model.n_features) == model.coef.shape
    assert model.param_dtype == torch.float64 and model.param_device == theta.device
    bare = LogisticRegression(2, fit_intercept=False)
    assert not bare.has_intercept and bare.intercept is None and bare.n_bias == 0


def test_only_models_read_the_linear_layer():
    """The GLM owns its parameter layout; every other module reads it
    through the accessors (``coef``, ``intercept``, ``has_intercept``, ``param_dtype``,
    ``param_device``, ``n_weights``, ``flat_parameters``...), never ``.linear.weight``
    or ``.linear.bias``."""
    import re
    from pathlib import Path

    import torchglm

    root = Path(torchglm.__file__).parent
    pattern = re.compile(r"\.linear\.(weight|bias)")
    hits = [
        f"{path.relative_to(root.parent)}:{i}"
        for path in sorted(root.rglob("*.py"))
        if "models" not in path.relative_to(root).parts[:1]
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert hits == []
