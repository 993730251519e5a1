"""Bayesian GLM classifiers measured: MAP vs Laplace-predictive vs MCMC-predictive.

For each problem the training split fixes the MAP (Newton) under the prior
``N(0, lambda I)``, the Laplace posterior, and 4 NUTS chains (Pyro, whitened by
the Laplace posterior). Reported per problem:

* test NLL / accuracy / ECE (15 bins) of the three predictives;
* how far the Laplace predictive is from the MCMC one (mean and max |dp|), and
  how far the probit approximation is from the exact 1-D integral under the
  same Laplace Gaussian (Gauss-Hermite, 64 nodes), i.e. which part of the
  Laplace-vs-MCMC gap is the Gaussian posterior and which is the approximation;
* NUTS diagnostics (max split R-hat, min ESS) and wall times (MAP + Laplace, NUTS);
* lambda chosen by the Laplace evidence and by the validation NLL (the lecture notes on
  probabilistic classification, §14).

Problems: breast_cancer (logistic, d = 30), two overlapping Gaussian classes in
2-D with 50 training and 700 test points (logistic, a small-sample case),
gaussians2 (probit), iris (softmax, K = 3).
Features are standardized on the training split (torchglm's data module).

    python bench/bayes.py            # about a minute on 1 idle core
    python bench/bayes.py --quick    # fewer draws

Writes bench/results/bayes.json.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from torchglm import LogisticRegression, ProbitRegression, SoftmaxRegression
from torchglm.bayes import (
    GaussianPrior,
    evidence_curve,
    laplace_posterior,
    predictive,
    predictive_metrics,
    sample_posterior,
    validation_curve,
)
from torchglm.training import GLMDataModule

PROBLEMS = [
    # name, data module args, model factory, prior variance
    ("breast_cancer/logistic", {"source": "breast_cancer"}, lambda d: LogisticRegression(d), 1.0),
    (
        "gaussians2-small/logistic",
        {
            "source": "gaussians2",
            "val_fraction": 0.25,
            "test_fraction": 0.7,
            "dataset_options": {"n_samples": 1000, "separation": 1.0},
        },
        lambda d: LogisticRegression(d),
        10.0,
    ),
    (
        "gaussians2/probit",
        {"source": "gaussians2", "dataset_options": {"n_samples": 1000}},
        lambda d: ProbitRegression(d),
        1.0,
    ),
    ("iris/softmax", {"source": "iris"}, lambda d: SoftmaxRegression(d, 3), 1.0),
]


def _exact_logistic(model, post, x):
    """E[sigma(a)], a ~ N(mu_a, sigma_a^2), by 64-point Gauss-Hermite quadrature."""
    pred = predictive(model, post, x)
    nodes, weights = np.polynomial.hermite_e.hermegauss(64)
    nodes, weights = torch.as_tensor(nodes), torch.as_tensor(weights / weights.sum())
    a = pred.eta_mean[:, None] + pred.eta_var.sqrt()[:, None] * nodes
    return pred.proba, (torch.sigmoid(a) * weights).sum(1)


def run_problem(name, data_args, factory, lam, chains, draws, warmup):
    dm = GLMDataModule(batch_size=None, **data_args)
    dm.setup()
    (x, y), val, (xt, yt) = dm.split("train"), dm.split("val"), dm.split("test")
    model = factory(x.shape[1]).double()
    t0 = time.perf_counter()
    post = laplace_posterior(model, (x, y), GaussianPrior(lam))
    t_laplace = time.perf_counter() - t0
    t0 = time.perf_counter()
    samples = sample_posterior(
        model, (x, y), post, num_chains=chains, num_samples=draws, warmup_steps=warmup, seed=0
    )
    t_nuts = time.perf_counter() - t0
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        probas = {
            "MAP": model.predict_proba(xt),
            "Laplace": predictive(model, post, xt, n_samples=20_000, generator=gen).proba,
            "MCMC": predictive(model, samples, xt).proba,
        }
    rows = {k: predictive_metrics(p, yt) for k, p in probas.items()}
    d = (probas["Laplace"] - probas["MCMC"]).abs()
    out = {
        "n_train": int(x.shape[0]),
        "n_test": int(xt.shape[0]),
        "n_coef": int(post.mean.numel()),
        "prior_variance": lam,
        "test": rows,
        "laplace_vs_mcmc": {"mean_abs_diff": float(d.mean()), "max_abs_diff": float(d.max())},
        "nuts": samples.diagnostics(),
        "seconds": {"map_and_laplace": t_laplace, "nuts": t_nuts},
    }
    if model.family.link.name == "logit":
        approx, exact = _exact_logistic(model, post, xt)
        out["probit_approx_vs_exact_laplace_max_abs_diff"] = float((approx - exact).abs().max())
    grid = [10 ** (e / 2) for e in range(-6, 7)]
    ev = evidence_curve(model, (x, y), grid, refine_steps=10)
    va = validation_curve(model, (x, y), val, grid)
    out["lambda"] = {
        "evidence": ev.best_lambda,
        "evidence_at_boundary": ev.at_boundary,
        "validation": va.best_lambda,
        "validation_at_boundary": va.at_boundary,
    }
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    chains, draws, warmup = (4, 200, 100) if args.quick else (4, 1000, 300)
    results = {
        "settings": {
            "num_chains": chains,
            "num_samples": draws,
            "warmup_steps": warmup,
            "torch_threads": torch.get_num_threads(),
        },
        "problems": {},
    }
    for name, data_args, factory, lam in PROBLEMS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = run_problem(name, data_args, factory, lam, chains, draws, warmup)
        results["problems"][name] = r
        print(
            f"\n{name}: n_train={r['n_train']} n_test={r['n_test']} coefficients={r['n_coef']} "
            f"lambda={r['prior_variance']}"
        )
        print(f"{'predictive':<10}{'nll':>9}{'accuracy':>10}{'ece':>9}")
        for k, row in r["test"].items():
            print(f"{k:<10}{row['nll']:>9.4f}{row['accuracy']:>10.4f}{row['ece']:>9.4f}")
        lv = r["laplace_vs_mcmc"]
        extra = r.get("probit_approx_vs_exact_laplace_max_abs_diff")
        print(
            f"|p_Laplace - p_MCMC|: mean {lv['mean_abs_diff']:.4f} max {lv['max_abs_diff']:.4f}"
            + ("" if extra is None else f"; probit approx vs exact Laplace integral: max {extra:.4f}")
        )
        print(
            f"NUTS: max R-hat {r['nuts']['max_rhat']:.4f}, min ESS {r['nuts']['min_ess']:.0f}; "
            f"time MAP+Laplace {r['seconds']['map_and_laplace']:.2f} s, NUTS {r['seconds']['nuts']:.1f} s"
        )
        lam = r["lambda"]
        print(
            f"lambda by evidence {lam['evidence']:.3g}{' (grid edge)' if lam['evidence_at_boundary'] else ''}, "
            f"by validation NLL {lam['validation']:.3g}{' (grid edge)' if lam['validation_at_boundary'] else ''}"
        )
    out = Path(__file__).resolve().parent / "results" / "bayes.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
