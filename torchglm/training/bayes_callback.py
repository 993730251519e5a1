"""A Lightning callback that turns a ``train.py`` MAP fit into a Bayesian analysis.

After the trainer has fitted the MAP (``solver: newton``), :class:`BayesianEvaluation`

1. takes the prior ``N(0, lambda I)`` whose MAP the model's penalty is
   (``lambda = 1 / (l2 n)``, flat bias prior) or the one configured, refitting
   the MAP when it differs;
2. computes the ``lambda`` curves (Laplace evidence on the training split,
   MAP NLL/accuracy on the validation split) and optionally adopts the chosen
   ``lambda``;
3. builds the Laplace posterior, optionally the Jaakkola-Jordan variational one
   (``variational=True``, :mod:`torchglm.bayes.variational`), and runs NUTS
   (short chains, R-hat and ESS);
4. scores MAP vs Laplace vs variational vs MCMC predictives on the test split
   (NLL, accuracy, ECE, and the wall time each posterior took: ``report["wall_s"]``),
   prints the table, logs it to TensorBoard and writes
   ``bayes.json``, ``lambda_curves.json`` and ``posterior.pt`` in the run directory;
5. stores the posterior (mean, covariance, samples) in the checkpoint
   (``checkpoint["bayes_posterior"]``) and re-saves the checkpoint, so the saved
   weights are the MAP the posterior is centred on.

The features the callback hands the model are the task's (standardized, then
the task's basis ``phi`` if any). It is a single-process analysis.

The callback lives in the training layer (it is the one piece of :mod:`torchglm.bayes`
that needs Lightning).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Literal

import pytorch_lightning as pl
import torch

from .._validation import check_positive, fail
from ..bayes.laplace import LaplacePosterior, fit_map, laplace_posterior
from ..bayes.metrics import format_table, predictive_metrics
from ..bayes.predictive import predictive
from ..bayes.prior import GaussianPrior
from ..bayes.sampling import PosteriorSamples, sample_posterior
from ..bayes.selection import LambdaCurve, evidence_curve, validation_curve
from ..bayes.variational import VariationalPosterior, has_jj_bound, variational_posterior
from .features import feature_map

__all__ = ["BayesianEvaluation"]


def _stderr_line(text: str) -> None:
    print(f"BayesianEvaluation: {text}", file=sys.stderr, flush=True)


class BayesianEvaluation(pl.Callback):
    """Laplace posterior, NUTS and predictive comparison after a MAP fit.

    Args:
        prior_variance: ``lambda``; ``None`` takes ``1 / (l2 n)`` from the fitted model.
        bias_variance: the bias prior variance (``None``: flat, as in the fit).
        select_lambda: ``"evidence"`` or ``"validation"`` adopts that curve's
            ``lambda`` (and refits the MAP); ``"none"`` keeps the prior above.
        lambdas: grid for the curves (default :func:`~torchglm.bayes.default_lambdas`);
            an empty list skips the curves.
        num_chains, num_samples, warmup_steps: NUTS settings; ``num_chains=0`` skips MCMC.
        mc_samples: Laplace draws for Monte Carlo predictives (softmax).
        ece_bins: bins of the expected calibration error.
        seed: seed of the samplers.
        variational: also fit the Jaakkola-Jordan variational posterior under the same
            prior and add its predictive to the table (logistic regression only; other
            models skip the row with a note).

    Example (in a ``train.py`` config)::

        trainer:
          callbacks:
            - class_path: torchglm.training.bayes_callback.BayesianEvaluation
              init_args: {num_chains: 4, num_samples: 300}
    """

    def __init__(
        self,
        prior_variance: float | None = None,
        bias_variance: float | None = None,
        select_lambda: Literal["none", "evidence", "validation"] = "none",
        lambdas: list[float] | None = None,
        num_chains: int = 4,
        num_samples: int = 300,
        warmup_steps: int = 200,
        mc_samples: int = 4000,
        ece_bins: int = 15,
        seed: int = 0,
        variational: bool = False,
    ):
        if prior_variance is not None:
            check_positive("prior_variance", prior_variance)
        if bias_variance is not None:
            check_positive("bias_variance", bias_variance)
        if select_lambda not in ("none", "evidence", "validation"):
            raise fail("select_lambda", "one of ['none', 'evidence', 'validation']", repr(select_lambda))
        if num_chains == 1 or num_chains < 0:
            raise fail("num_chains", "0 (no MCMC) or at least 2", num_chains)
        if select_lambda != "none" and lambdas is not None and len(lambdas) == 0:
            raise fail("lambdas", f"a grid for select_lambda={select_lambda!r}", lambdas)
        self.prior_variance = prior_variance
        self.bias_variance = bias_variance
        self.select_lambda = select_lambda
        self.lambdas = lambdas
        self.num_chains, self.num_samples, self.warmup_steps = num_chains, num_samples, warmup_steps
        self.variational = bool(variational)
        self.mc_samples, self.ece_bins, self.seed = mc_samples, ece_bins, seed
        self.laplace: LaplacePosterior | None = None
        self.samples: PosteriorSamples | None = None
        self.vb: VariationalPosterior | None = None
        self.wall_s: dict[str, float] = {}
        self._fit_start: float | None = None
        self.report: dict[str, Any] = {}
        self.checkpoint_path: str | None = None

    # -- Lightning hooks ------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        if trainer.world_size > 1:
            raise fail(
                "trainer", "a single process for BayesianEvaluation", f"world_size={trainer.world_size}"
            )

    def on_fit_start(self, trainer, pl_module) -> None:
        self._fit_start = time.perf_counter()

    def on_fit_end(self, trainer, pl_module) -> None:
        if self._fit_start is not None:
            self.wall_s["MAP"] = time.perf_counter() - self._fit_start  # the trainer's fit
        self.run(trainer, pl_module)
        # (Re-)save the checkpoint: it then holds the MAP and its posterior together.
        # Without a saved one (pass-based fits take no optimizer step, so Lightning's
        # ModelCheckpoint may have skipped them) write ``map_posterior.ckpt`` beside it.
        # Lightning's ModelCheckpoint (train.py's other Checkpoint callback writes last.ckpt).
        ckpt = next((c for c in trainer.callbacks if isinstance(c, pl.callbacks.ModelCheckpoint)), None)
        if ckpt is not None and ckpt.best_model_path:
            self.checkpoint_path = ckpt.best_model_path
        else:
            folder = (
                Path(ckpt.dirpath)
                if ckpt is not None and ckpt.dirpath
                else Path(trainer.default_root_dir) / "checkpoints"
            )
            self.checkpoint_path = str(folder / "map_posterior.ckpt")
        trainer.save_checkpoint(self.checkpoint_path)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        if self.laplace is not None:
            checkpoint["bayes_posterior"] = self.posterior_state()

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("bayes_posterior")
        if state is not None:
            self.laplace = LaplacePosterior.from_state_dict(state["laplace"])

    # -- the analysis -----------------------------------------------------------------
    def posterior_state(self) -> dict[str, Any]:
        """Laplace mean/covariance (the variational one, the MCMC draws) as plain tensors."""
        return {
            "laplace": self.laplace.state_dict(),
            "variational": None if self.vb is None else self.vb.state_dict(),
            "samples": None if self.samples is None else self.samples.state_dict(),
        }

    @staticmethod
    def _features(pl_module, split: str, datamodule):
        x, y = datamodule.split(split)
        basis = feature_map(pl_module)
        with torch.no_grad():
            x = x if basis is None else basis(x)
        return x.to(pl_module.model.param_dtype), y

    def run(self, trainer, pl_module) -> dict[str, Any]:
        """The whole analysis on the trainer's data module; returns the report."""
        model, dm = pl_module.model, trainer.datamodule
        train = self._features(pl_module, "train", dm)
        val = self._features(pl_module, "val", dm)
        x_test, y_test = self._features(pl_module, "test", dm)
        n = train[0].shape[0]
        if self.prior_variance is None and not model.l2 > 0:
            raise fail("model l2", "a positive penalty (or BayesianEvaluation.prior_variance)", model.l2)
        lam = (
            self.prior_variance
            if self.prior_variance is not None
            else GaussianPrior.from_l2(model.l2, n).variance
        )
        curves = self._curves(model, train, val)
        if self.select_lambda != "none":
            lam = curves[self.select_lambda].best_lambda
        prior = GaussianPrior(lam, self.bias_variance)
        # The fitted weights are this prior's MAP only for the fit's own penalty and a flat bias.
        refit = self.bias_variance is not None or not math.isclose(prior.l2(n), model.l2, rel_tol=1e-9)
        if refit:
            start = time.perf_counter()
            fit_map(model, train, prior)
            self.wall_s["MAP"] = time.perf_counter() - start
        start = time.perf_counter()
        self.laplace = laplace_posterior(model, train, prior, fit=False)
        self.wall_s["Laplace"] = time.perf_counter() - start  # at the MAP: one Hessian pass
        if self.variational and not has_jj_bound(model):
            print(
                f"BayesianEvaluation: no variational row: the Jaakkola-Jordan bound is for "
                f"logistic regression, not {model.family.name}/{model.family.link.name}",
                file=sys.stderr,
                flush=True,
            )
        elif self.variational:
            start = time.perf_counter()
            self.vb = variational_posterior(model, train, prior)
            self.wall_s["Variational"] = time.perf_counter() - start
        if self.num_chains:
            # NUTS takes minutes on larger data and has no progress bar here: say what runs.
            start = time.perf_counter()
            print(
                f"BayesianEvaluation: NUTS, {self.num_chains} chains x ({self.warmup_steps} warmup + "
                f"{self.num_samples}) draws ...",
                file=sys.stderr,
                flush=True,
            )
            self.samples = sample_posterior(
                model,
                train,
                self.laplace,
                num_chains=self.num_chains,
                num_samples=self.num_samples,
                warmup_steps=self.warmup_steps,
                seed=self.seed,
                progress=_stderr_line,
            )
            self.wall_s["MCMC"] = time.perf_counter() - start
            print(
                f"BayesianEvaluation: NUTS done in {self.wall_s['MCMC']:.1f} s", file=sys.stderr, flush=True
            )
        table, diff = self._compare(model, x_test, y_test)
        self.report = {
            "prior": {
                "variance": lam,
                "bias_variance": self.bias_variance,
                "l2": model.l2,
                "select_lambda": self.select_lambda,
                "refit_map": refit,
            },
            "laplace": {
                "log_evidence": self.laplace.log_evidence,
                "grad_norm": self.laplace.grad_norm,
                "dim": self.laplace.dim,
            },
            "variational": None
            if self.vb is None
            else {
                "elbo": self.vb.elbo,
                "n_iter": self.vb.result.n_iter,
                "converged": self.vb.result.converged,
            },
            "mcmc": None if self.samples is None else {**self.samples.diagnostics(), **self.samples.info},
            "wall_s": {name: self.wall_s[name] for name in table if name in self.wall_s},
            "test": table,
            "laplace_vs_mcmc": diff,
            "lambda_curves": {
                k: {"best_lambda": c.best_lambda, "at_boundary": c.at_boundary} for k, c in curves.items()
            },
        }
        if trainer.is_global_zero:
            self._write(trainer, table, curves)
        return self.report

    def _curves(self, model, train, val) -> dict[str, LambdaCurve]:
        if self.lambdas is not None and len(self.lambdas) == 0:
            return {}
        return {
            "evidence": evidence_curve(model, train, self.lambdas, self.bias_variance),
            "validation": validation_curve(model, train, val, self.lambdas, self.bias_variance),
        }

    @torch.no_grad()
    def _compare(self, model, x_test, y_test):
        gen = torch.Generator().manual_seed(self.seed)
        probas = {
            "MAP": model.predict_proba(x_test),
            "Laplace": predictive(
                model, self.laplace, x_test, n_samples=self.mc_samples, generator=gen
            ).proba,
        }
        if self.vb is not None:
            probas["Variational"] = predictive(model, self.vb, x_test).proba
        if self.samples is not None:
            probas["MCMC"] = predictive(model, self.samples, x_test).proba
        table = {name: predictive_metrics(p, y_test, self.ece_bins) for name, p in probas.items()}
        diff = None
        if "MCMC" in probas:
            d = (probas["Laplace"] - probas["MCMC"]).abs()
            diff = {"mean_abs_diff": float(d.mean()), "max_abs_diff": float(d.max())}
        return table, diff

    def _write(self, trainer, table, curves) -> None:
        run_dir = Path(trainer.default_root_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        header = f"Bayesian evaluation on the test split (lambda = {self.report['prior']['variance']:.4g})"
        wall = self.report["wall_s"]
        lines = [
            header,
            format_table(
                {name: {**row, "wall_s": wall.get(name, float("nan"))} for name, row in table.items()}
            ),
        ]
        if self.report["mcmc"] is not None:
            m = self.report["mcmc"]
            lines.append(
                f"NUTS: {m['num_chains']} chains x {m['num_samples']} draws, "
                f"max R-hat {m['max_rhat']:.4f}, min ESS {m['min_ess']:.0f}; "
                f"|p_Laplace - p_MCMC| mean {self.report['laplace_vs_mcmc']['mean_abs_diff']:.4f} "
                f"max {self.report['laplace_vs_mcmc']['max_abs_diff']:.4f}"
            )
        for name, c in curves.items():
            lines.append(f"lambda by {name}: {c.best_lambda:.4g}" + (" (grid edge)" if c.at_boundary else ""))
        print("\n".join(lines))
        (run_dir / "bayes.json").write_text(json.dumps(self.report, indent=2) + "\n")
        (run_dir / "lambda_curves.json").write_text(
            json.dumps({k: c.to_dict() for k, c in curves.items()}, indent=2) + "\n"
        )
        torch.save(self.posterior_state(), run_dir / "posterior.pt")
        logger = trainer.logger
        if logger is None:
            return
        flat = {f"bayes/test_{name}/{k}": v for name, row in table.items() for k, v in row.items()}
        flat.update({f"bayes/wall_s/{name}": v for name, v in self.report["wall_s"].items()})
        flat["bayes/lambda"] = self.report["prior"]["variance"]
        flat["bayes/log_evidence"] = self.report["laplace"]["log_evidence"]
        if self.report["mcmc"] is not None:
            flat["bayes/mcmc_max_rhat"] = self.report["mcmc"]["max_rhat"]
            flat["bayes/mcmc_min_ess"] = self.report["mcmc"]["min_ess"]
        logger.log_metrics(flat, step=trainer.global_step)
        experiment = getattr(logger, "experiment", None)
        if curves and hasattr(experiment, "add_figure"):
            # TensorBoard scalars take integer steps: these put the curves against the grid
            # index (the log10_lambda scalar gives each index its lambda); the figure plots
            # them against lambda, and the text tab lists (lambda, score) pairs.
            for name, c in curves.items():
                for i, (lam, score) in enumerate(zip(c.lambdas, c.scores[c.criterion])):
                    experiment.add_scalar(f"bayes/lambda_curve/{name}/{c.criterion}", score, i)
                    experiment.add_scalar(f"bayes/lambda_curve/{name}/log10_lambda", math.log10(lam), i)
                rows = [
                    f"| {lam:.6g} | {score:.6g} |" for lam, score in zip(c.lambdas, c.scores[c.criterion])
                ]
                experiment.add_text(
                    f"bayes/lambda_curve/{name}",
                    "\n".join([f"| lambda | {c.criterion} |", "|---|---|", *rows]),
                    trainer.global_step,
                )
            experiment.add_figure("bayes/lambda_curves", _curve_figure(curves), trainer.global_step)


def _curve_figure(curves: dict[str, LambdaCurve]):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5 * len(curves), 3.5))  # not pyplot's: no backend change
    axes = fig.subplots(1, len(curves), squeeze=False)
    for ax, (name, c) in zip(axes[0], curves.items()):
        ax.semilogx(c.lambdas, c.scores[c.criterion], "o-")
        ax.axvline(c.best_lambda, color="k", ls="--", lw=1)
        ax.set_xlabel("prior variance lambda")
        ax.set_ylabel(c.criterion)
        ax.set_title(f"{name}: best lambda = {c.best_lambda:.3g}")
    fig.tight_layout()
    return fig
