"""Generative (GDA) vs discriminative (logistic regression), measured: the claim of the lecture
notes on probabilistic classification, §9.

"Better predictions [for the discriminative model], if the assumptions done with
respect to p(x|C_k) are poor" — and, conversely, the generative model needs fewer
data when its assumptions hold (Ng & Jordan 2002). Two synthetic two-class
problems in d = 10 dimensions, test sets of 20,000 points, training sets of
n = 20 ... 5000 points, ``repeats`` independent training sets per n:

* ``gaussian``: x | C_k ~ N(mu_k, Sigma) with one shared covariance. LDA is the
  true model (and so is logistic regression: the posterior is logistic), but
  LDA has the stronger assumptions and estimates fewer free directions.
* ``non_gaussian``: x from a skewed, heavy-tailed mixture (clusters of different
  shapes), y | x ~ Bernoulli(sigma(w^T x + b)). The posterior is exactly logistic
  (logistic regression is well specified) while the class conditionals are far
  from Gaussian (LDA is misspecified).

Models: ``torchglm.models.LinearDiscriminantAnalysis`` (closed form) and
``torchglm.LogisticRegression`` fitted with ``torchglm.solvers.fit(...,
solver="newton")``, with a weak Gaussian prior ``l2 = 1 / n`` (unit prior
precision on the summed log-likelihood) so the MLE exists on separable small samples.
Reported: mean test accuracy and mean test log loss (NLL per point) over the
repeats, with standard errors, and the Bayes-optimal values from the true model.

    python bench/generative_vs_discriminative.py            # full table (a few minutes)
    python bench/generative_vs_discriminative.py --quick    # fewer repeats

Writes bench/results/generative_vs_discriminative.json.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from torchglm import LogisticRegression
from torchglm.models import LinearDiscriminantAnalysis
from torchglm.solvers import fit

D = 10
N_TEST = 20000
DELTA = 3.0
SIZES = [20, 30, 50, 100, 200, 500, 1000, 5000]


class Gaussian:
    """Two Gaussian classes, shared covariance, Mahalanobis distance DELTA between the means."""

    name = "gaussian"

    def __init__(self, g: torch.Generator):
        a = torch.randn(D, D, generator=g)
        self.cov = a @ a.T / D + 0.5 * torch.eye(D)
        self.L = torch.linalg.cholesky(self.cov)
        direction = torch.randn(D, generator=g)
        # mu_1 - mu_0 = delta * L u / |u| gives Mahalanobis distance delta.
        self.mu = torch.stack([torch.zeros(D), DELTA * self.L @ (direction / direction.norm())])

    def draw(self, n: int, g: torch.Generator):
        y = torch.bernoulli(torch.full((n,), 0.5), generator=g).long()
        x = self.mu[y] + torch.randn(n, D, generator=g) @ self.L.T
        return x, y

    def true_logit(self, x):
        s_inv_dmu = torch.cholesky_solve((self.mu[1] - self.mu[0]).unsqueeze(1), self.L).squeeze(1)
        w0 = 0.5 * (
            self.mu[0] @ torch.cholesky_solve(self.mu[0].unsqueeze(1), self.L).squeeze(1)
            - self.mu[1] @ torch.cholesky_solve(self.mu[1].unsqueeze(1), self.L).squeeze(1)
        )
        return x @ s_inv_dmu + w0


class NonGaussian:
    """Skewed heavy-tailed mixture inputs, logistic posterior."""

    name = "non_gaussian"

    def __init__(self, g: torch.Generator):
        self.w = torch.randn(D, generator=g)
        self.w = 2.0 * self.w / self.w.norm()
        self.b = 0.5
        self.shift = torch.randn(D, generator=g)
        self.shift = 3.0 * self.shift / self.shift.norm()

    def draw_x(self, n, g):
        # Half the points in a tight cluster, half in a wide, skewed (exponential)
        # and heavy-tailed (Student t, 3 dof) cloud shifted away from it.
        wide = torch.rand(n, generator=g) < 0.5
        tight = 0.3 * torch.randn(n, D, generator=g)
        expo = -torch.log(torch.rand(n, D, generator=g)) - 1.0
        chi2 = sum(torch.randn(n, 1, generator=g) ** 2 for _ in range(3))
        heavy = torch.randn(n, D, generator=g) / torch.sqrt(chi2 / 3)
        cloud = self.shift + 1.5 * expo + 0.5 * heavy
        return torch.where(wide.unsqueeze(1), cloud, tight)

    def draw(self, n, g):
        x = self.draw_x(n, g)
        y = torch.bernoulli(torch.sigmoid(self.true_logit(x)), generator=g).long()
        return x, y

    def true_logit(self, x):
        return x @ self.w + self.b


def se(t: torch.Tensor) -> float:
    """Standard error of the mean."""
    return float(t.std() / math.sqrt(len(t))) if len(t) > 1 else 0.0


def metrics(p1: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Accuracy and mean log loss of P(y=1|x) = p1."""
    acc = float(((p1 > 0.5).long() == y).double().mean())
    p1 = p1.clamp(1e-300, 1 - 1e-16)  # only to report a finite log loss for p in {0, 1}
    nll = float(F.binary_cross_entropy(p1, y.double()))
    return acc, nll


def run(scenario, repeats: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    problem = scenario(g)
    x_test, y_test = problem.draw(N_TEST, g)
    bayes = metrics(torch.sigmoid(problem.true_logit(x_test)), y_test)
    rows = []
    for n in SIZES:
        reps = repeats if n <= 1000 else max(3, repeats // 4)
        scores = {"gda": [], "gda_shrunk": [], "logistic": []}
        for _ in range(reps):
            while True:
                x, y = problem.draw(n, g)
                if 0 < int(y.sum()) < n:
                    break
            lda = LinearDiscriminantAnalysis(D, 2)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lda.fit(x, y)
            scores["gda"].append(metrics(lda.predict_proba(x_test)[:, 1], y_test))
            shrunk = LinearDiscriminantAnalysis(D, 2, shrinkage=min(1.0, D / n))
            shrunk.fit(x, y)
            scores["gda_shrunk"].append(metrics(shrunk.predict_proba(x_test)[:, 1], y_test))
            lr = LogisticRegression(D, l2=1.0 / n)
            result = fit(lr, x, y, solver="newton")
            if not result.converged:
                raise RuntimeError(f"Newton did not converge at n={n}: {result.message}")
            with torch.no_grad():
                scores["logistic"].append(metrics(lr.predict_proba(x_test), y_test))
        row = {"n_train": n, "repeats": reps}
        for model, vals in scores.items():
            acc = torch.tensor([v[0] for v in vals])
            nll = torch.tensor([v[1] for v in vals])
            se = lambda t: float(t.std() / math.sqrt(len(t))) if len(t) > 1 else 0.0  # noqa: E731
            row[model] = {
                "accuracy": float(acc.mean()),
                "accuracy_se": se(acc),
                "log_loss": float(nll.mean()),
                "log_loss_se": se(nll),
            }
        # Paired over the same training sets: a smaller standard error than the difference of means.
        for model in ("gda", "gda_shrunk"):
            diff = torch.tensor([a[0] - b[0] for a, b in zip(scores[model], scores["logistic"])])
            row[f"{model}_minus_logistic_accuracy"] = {"mean": float(diff.mean()), "se": se(diff)}
        rows.append(row)
    return {"scenario": problem.name, "bayes_accuracy": bayes[0], "bayes_log_loss": bayes[1], "rows": rows}


def table(result) -> str:
    lines = [
        f"{result['scenario']}: Bayes-optimal accuracy {result['bayes_accuracy']:.4f}, "
        f"log loss {result['bayes_log_loss']:.4f}",
        f"{'n_train':>7} {'reps':>4} | {'GDA acc':>14} {'GDA-shr acc':>14} {'LR acc':>14} | "
        f"{'GDA logloss':>15} {'GDA-shr logloss':>15} {'LR logloss':>15} | GDA-shr - LR acc (paired)",
    ]
    models = ("gda", "gda_shrunk", "logistic")
    for r in result["rows"]:
        acc = " ".join(f"{r[m]['accuracy']:.4f}±{r[m]['accuracy_se']:.4f}" for m in models)
        nll = " ".join(f"{r[m]['log_loss']:>7.4f}±{r[m]['log_loss_se']:.4f}" for m in models)
        d = r["gda_shrunk_minus_logistic_accuracy"]
        lines.append(f"{r['n_train']:>7} {r['repeats']:>4} | {acc} | {nll} | {d['mean']:+.4f}±{d['se']:.4f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="4 repeats per size")
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "results" / "generative_vs_discriminative.json")
    )
    args = parser.parse_args()
    torch.set_default_dtype(torch.float64)
    repeats = 4 if args.quick else args.repeats
    start = time.perf_counter()
    results = [run(Gaussian, repeats), run(NonGaussian, repeats)]
    for r in results:
        print(table(r))
        print()
    out = {
        "command": "python bench/generative_vs_discriminative.py" + (" --quick" if args.quick else ""),
        "d": D,
        "n_test": N_TEST,
        "seconds": round(time.perf_counter() - start, 1),
        "logistic_solver": "torchglm.solvers.fit(solver='newton'), l2 = 1/n",
        "gda": "torchglm.models.LinearDiscriminantAnalysis (closed form MLE, no regularization)",
        "gda_shrunk": "the same with shrinkage = min(1, d / n) towards (mean variance) I",
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out} ({out['seconds']} s)")


if __name__ == "__main__":
    main()
