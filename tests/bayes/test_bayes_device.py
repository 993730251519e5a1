"""Device-parametrized tests for the Bayesian layer (``cpu``, and ``cuda``
when present): the Laplace and variational posteriors, the predictive and the evidence
fixed point run where the data are, and on an accelerator equal the CPU results."""

import pytest
import torch

from torchglm import LogisticRegression
from torchglm.bayes import (
    GaussianPrior,
    evidence_fixed_point,
    laplace_posterior,
    predictive,
    variational_posterior,
)
from data_util import bernoulli_data
from devices import DEVICES


def _run(device: str) -> dict:
    x, y = bernoulli_data(300, 3, (1.0, -2.0, 0.5))
    y = y.long()
    xd, yd = x.to(device), y.to(device)
    prior = GaussianPrior(variance=4.0)
    lap = laplace_posterior(LogisticRegression(3, dtype=torch.float64).to(device), (xd, yd), prior)
    model = LogisticRegression(3, dtype=torch.float64).to(device)
    vb = variational_posterior(model, (xd, yd), prior)
    pred = predictive(model, lap, xd[:20], method="probit")
    mc = predictive(
        model, lap, xd[:20], method="mc", n_samples=500, generator=torch.Generator(device).manual_seed(0)
    )
    ev = evidence_fixed_point(LogisticRegression(3, dtype=torch.float64).to(device), (xd, yd))
    return {
        "laplace mean": lap.mean,
        "laplace covariance": lap.covariance,
        "variational mean": vb.mean,
        "variational covariance": vb.covariance,
        "probit predictive": pred.proba,
        "mc predictive": mc.proba,
        "evidence lambda": torch.tensor(ev.best_lambda, dtype=torch.float64),
    }


@pytest.mark.parametrize("device", DEVICES)
def test_posteriors_and_predictives_on_every_device(device):
    out = _run(device)
    for name, t in out.items():
        if t.dim():
            assert t.device.type == device and t.dtype == torch.float64, name
            assert bool(torch.isfinite(t).all()), name
    assert 0 < float(out["probit predictive"].min()) and float(out["probit predictive"].max()) < 1
    # Monte Carlo with 500 draws around the probit approximation's probabilities
    torch.testing.assert_close(out["mc predictive"], out["probit predictive"], rtol=0, atol=0.05)
    if device != "cpu":
        ref = _run("cpu")
        for name in (
            "laplace mean",
            "laplace covariance",
            "variational mean",
            "variational covariance",
            "probit predictive",
            "evidence lambda",
        ):
            torch.testing.assert_close(out[name].cpu(), ref[name], rtol=1e-8, atol=1e-10, msg=name)
