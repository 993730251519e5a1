"""Device check: the Bayesian pipeline (Laplace, predictive, NUTS, evidence curve) on CUDA
tensors gives the CPU results (the MCMC draws differ only by their random streams).

    python bench/bayes_device.py     # needs a CUDA device

Prints one row per model: the devices of the results, max differences CPU vs CUDA,
R-hat on CUDA, the evidence-chosen lambda and the wall times.
"""

import time, torch, warnings

warnings.simplefilter("ignore")
torch.set_default_dtype(torch.float64)
from torchglm import LogisticRegression, ProbitRegression, SoftmaxRegression
from torchglm.bayes import GaussianPrior, laplace_posterior, predictive, sample_posterior, evidence_curve

print("cuda", torch.cuda.is_available(), torch.__version__, flush=True)
res = {}
for dev in ["cpu", "cuda"]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2000, 5, generator=g)
    w = torch.randn(5, generator=g)
    y = torch.bernoulli(torch.sigmoid(x @ w), generator=g).long()
    y3 = torch.randint(0, 3, (2000,), generator=g)
    out = {}
    for name, M, yy in [
        ("logistic", LogisticRegression(5), y),
        ("probit", ProbitRegression(5), y),
        ("softmax", SoftmaxRegression(5, 3), y3),
    ]:
        M = M.to(dev)
        xd, yd = x.to(dev), yy.to(dev)
        t = time.time()
        post = laplace_posterior(M, (xd, yd), GaussianPrior(1.0))
        pred = predictive(M, post, xd[:100], generator=torch.Generator().manual_seed(0))
        tl = time.time() - t
        t = time.time()
        s = sample_posterior(M, (xd, yd), post, num_chains=2, num_samples=150, warmup_steps=100)
        tn = time.time() - t
        pm = predictive(M, s, xd[:100])
        ev = evidence_curve(M, (xd, yd), [0.1, 1.0, 10.0], refine_steps=3).best_lambda
        out[name] = dict(
            mean=post.mean.cpu(),
            cov=post.covariance.cpu(),
            ev=post.log_evidence,
            proba=pred.proba.cpu(),
            mcmc=pm.proba.cpu(),
            mcmc_mean=s.mean.cpu(),
            rhat=s.diagnostics()["max_rhat"],
            tl=tl,
            tn=tn,
            best=ev,
            dev=str(pred.proba.device),
            sdev=str(s.samples.device),
        )
        print(dev, name, "done", flush=True)
    res[dev] = out
print(
    "model devices | max|dmean| max|dcov| |dlogZ| max|dp_laplace| max|dp_mcmc| | rhat(cuda) | best-lambda cpu/cuda | t_laplace cpu/cuda | t_nuts cpu/cuda"
)
for k in res["cpu"]:
    a, b = res["cpu"][k], res["cuda"][k]
    print(
        k,
        b["dev"],
        b["sdev"],
        f"{(a['mean'] - b['mean']).abs().max():.2e} {(a['cov'] - b['cov']).abs().max():.2e} "
        f"{abs(a['ev'] - b['ev']):.2e} {(a['proba'] - b['proba']).abs().max():.2e} {(a['mcmc'] - b['mcmc']).abs().max():.3f} "
        f"| {b['rhat']:.4f} | {a['best']:.4g}/{b['best']:.4g} | {a['tl']:.2f}/{b['tl']:.2f} | {a['tn']:.1f}/{b['tn']:.1f}",
    )
