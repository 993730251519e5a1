"""Sampling the exact posterior knowing only ``g(w) = p(w) p(D|w)`` (the lecture notes on
probabilistic classification, §12, option 3: Monte Carlo; Hoffman & Gelman 2014, the No-U-Turn Sampler).

Pyro's No-U-Turn sampler (Hoffman & Gelman 2014) runs on the potential
``U(theta) = -ln g(theta) = sum_i s_i nll_i(theta) + theta^T P theta / 2``. The
chains run in whitened coordinates ``theta = m + F z`` from the Laplace posterior
``N(m, F F^T)``: there the target is close to ``N(0, I)``, so a unit mass matrix
and a short warm-up suffice (the change of variables is linear, its Jacobian a
constant). Chains run one after the other with their own seeds (robust on any
number of cores, reproducible) from overdispersed starts ``z ~ N(0, init_scale^2 I)``;
split R-hat and the effective sample size (Gelman et al., BDA3 11.4-11.5, via
``pyro.ops.stats``) are reported per coefficient.
"""

from __future__ import annotations

import time
from typing import Callable
from dataclasses import dataclass, field


import pyro
import torch
from pyro.infer import MCMC, NUTS
from pyro.ops.stats import effective_sample_size, split_gelman_rubin

from .._validation import check_positive, fail
from ._layout import as_batches, check_model, data_nll, n_bias, n_weights
from ._rng import global_rng_restored
from .laplace import LaplacePosterior
from .prior import GaussianPrior

__all__ = ["PosteriorSamples", "sample_posterior"]


@dataclass
class PosteriorSamples:
    """MCMC draws of ``theta = (vec W, b)``.

    Attributes:
        samples: shape (num_chains, num_samples, p).
        rhat: split R-hat per coefficient (p,); near 1 when the chains agree.
        ess: effective sample size per coefficient (p,), over all chains.
        prior: the prior the posterior was sampled under.
        info: sampler settings and per-chain step sizes.
    """

    samples: torch.Tensor
    rhat: torch.Tensor
    ess: torch.Tensor
    prior: GaussianPrior
    info: dict = field(default_factory=dict)

    def flat(self) -> torch.Tensor:
        """All draws, chains concatenated: (num_chains * num_samples, p)."""
        return self.samples.reshape(-1, self.samples.shape[-1])

    @property
    def mean(self) -> torch.Tensor:
        return self.flat().mean(0)

    @property
    def covariance(self) -> torch.Tensor:
        return torch.cov(self.flat().T).reshape(self.samples.shape[-1], -1)

    def diagnostics(self) -> dict:
        """``max_rhat`` and ``min_ess`` over coefficients (the usual pass marks:
        R-hat < 1.01, ESS > 100 per chain... or at least a few hundred in all)."""
        return {
            "max_rhat": float(self.rhat.max()),
            "min_ess": float(self.ess.min()),
            "num_chains": int(self.samples.shape[0]),
            "num_samples": int(self.samples.shape[1]),
        }

    def state_dict(self) -> dict:
        return {
            "samples": self.samples,
            "rhat": self.rhat,
            "ess": self.ess,
            "prior_variance": self.prior.variance,
            "bias_variance": self.prior.bias_variance,
            "info": self.info,
        }


def sample_posterior(
    model,
    data,
    laplace: LaplacePosterior,
    num_chains: int = 4,
    num_samples: int = 500,
    warmup_steps: int = 300,
    init_scale: float = 1.5,
    max_tree_depth: int = 8,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    progress_every: float = 10.0,
) -> PosteriorSamples:
    """Draw from ``p(theta | D) propto p(theta) p(D | theta)`` with NUTS.

    Args:
        model: the GLM (its family gives the likelihood); its parameters are not changed.
        data: ``(x, y)``, ``(x, y, weight)`` or a re-iterable of ``Batch``.
        laplace: the Laplace posterior under the prior to sample; it whitens the
            coordinates and gives the starting points.
        num_chains: chains, run one after the other (R-hat needs at least 2).
        num_samples: kept draws per chain.
        warmup_steps: adaptation steps per chain (step size only; discarded).
        init_scale: starts are ``m + init_scale F z``, overdispersed for ``> 1``.
        max_tree_depth: NUTS tree depth limit.
        seed: chain ``c`` uses seed ``seed + c``.
        progress: called with a one-line report (chain, stage, draws done, mean
            tree size, elapsed seconds) at most every ``progress_every`` seconds and
            at the end of each chain; ``None``: silent (``train.py`` prints them on
            stderr).

    Returns:
        :class:`PosteriorSamples` with R-hat and ESS.

    Example:
        >>> from torchglm.bayes import GaussianPrior, laplace_posterior
        >>> x = torch.randn(200, 2, dtype=torch.float64)
        >>> y = (x[:, 0] - x[:, 1] + torch.randn_like(x[:, 0]) > 0).double()
        >>> model = LogisticRegression(2)
        >>> post = laplace_posterior(model, (x, y), GaussianPrior(1.0))
        >>> draws = sample_posterior(model, (x, y), post, num_chains=2, num_samples=200,
        ...                          warmup_steps=100)
        >>> draws.samples.shape, draws.diagnostics()["max_rhat"] < 1.05
        (torch.Size([2, 200, 3]), True)
    """
    check_model(model)
    batches = as_batches(data, model)
    for name, v in (
        ("num_chains", num_chains),
        ("num_samples", num_samples),
        ("max_tree_depth", max_tree_depth),
        ("init_scale", init_scale),
    ):
        check_positive(name, v)
    check_positive("warmup_steps", warmup_steps, allow_zero=True)
    if num_chains < 2:
        raise fail("num_chains", "at least 2 (R-hat compares chains)", num_chains)
    if laplace.mean.numel() != n_weights(model) + n_bias(model):
        raise fail(
            "laplace",
            f"a posterior over {n_weights(model) + n_bias(model)} coefficients",
            laplace.mean.numel(),
        )
    prior = laplace.prior
    m, F = laplace.mean, laplace.scale
    prec = prior.precision(n_weights(model), n_bias(model), m)

    def potential(params):
        theta = m + F @ params["z"]
        return data_nll(model, theta, batches) + 0.5 * (prec * theta * theta).sum()

    draws, steps = [], []
    clock = {"start": time.perf_counter(), "last": time.perf_counter()}

    def report(c, kernel, stage, i, total, force=False):
        now = time.perf_counter()
        if progress is None or (not force and now - clock["last"] < progress_every):
            return
        clock["last"] = now
        progress(
            f"NUTS chain {c + 1}/{num_chains}: {stage} {i}/{total}, step size "
            f"{float(kernel.step_size):.3g}, {now - clock['start']:.0f} s"
        )

    # pyro.set_rng_seed reseeds torch, numpy and random globally: restored after.
    with global_rng_restored():
        for c in range(num_chains):
            pyro.set_rng_seed(seed + c)
            z0 = init_scale * torch.randn(F.shape[1], dtype=m.dtype).to(m.device)
            kernel = NUTS(
                potential_fn=potential,
                adapt_step_size=True,
                adapt_mass_matrix=False,
                max_tree_depth=max_tree_depth,
            )

            def hook(kernel, _samples, stage, i, c=c):
                warm = stage.startswith("Warmup")
                report(
                    c, kernel, "warmup" if warm else "sample", i + 1, warmup_steps if warm else num_samples
                )

            mcmc = MCMC(
                kernel,
                num_samples=num_samples,
                warmup_steps=warmup_steps,
                initial_params={"z": z0},
                disable_progbar=True,
                hook_fn=hook,
            )
            mcmc.run()
            report(c, kernel, "done: sample", num_samples, num_samples, force=True)
            z = mcmc.get_samples()["z"].detach()
            draws.append(m + z @ F.T)
            steps.append(float(kernel.step_size))
    samples = torch.stack(draws)
    rhat = split_gelman_rubin(samples, chain_dim=0, sample_dim=1)
    ess = effective_sample_size(samples, chain_dim=0, sample_dim=1)
    info = {
        "sampler": "NUTS (pyro)",
        "num_chains": num_chains,
        "num_samples": num_samples,
        "warmup_steps": warmup_steps,
        "step_sizes": steps,
        "seed": seed,
    }
    return PosteriorSamples(samples, rhat, ess, prior, info)
