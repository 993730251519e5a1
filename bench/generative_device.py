"""Generative classifiers on an accelerator: same fit as on the CPU, and its speed.

For every generative model: fit on the CPU and on ``--device`` (batches of 100k
rows), check that parameters and posteriors agree (float64), that ``sample``,
``to_linear`` and sparse count input run on the device, then time one
closed-form pass and one prediction pass over n = 1,000,000 rows, d = 64.

    python bench/generative_device.py --device cuda

Writes bench/results/generative_device.json. Needs only torch (no scikit-learn).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from torchglm.models import (
    BernoulliNB,
    GaussianNB,
    LinearDiscriminantAnalysis,
    MultinomialNB,
    PoissonNB,
    QuadraticDiscriminantAnalysis,
)

K, D = 3, 64


def data(cls, n, g):
    y = torch.randint(0, K, (n,), generator=g)
    if cls in (MultinomialNB, PoissonNB):
        rates = 0.2 + 3 * torch.rand(K, D, generator=g)
        return torch.poisson(rates[y], generator=g), y
    if cls is BernoulliNB:
        p = 0.1 + 0.8 * torch.rand(K, D, generator=g)
        return torch.bernoulli(p[y], generator=g), y
    means = torch.randn(K, D, generator=g)
    return means[y] + torch.randn(n, D, generator=g), y


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, repeat=3):
    fn()
    sync(device)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "generative_device.json"))
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_default_dtype(torch.float64)
    g = torch.Generator().manual_seed(0)
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "n": args.n,
        "d": D,
        "k": K,
        "models": {},
    }
    for cls in (
        LinearDiscriminantAnalysis,
        QuadraticDiscriminantAnalysis,
        GaussianNB,
        MultinomialNB,
        BernoulliNB,
        PoissonNB,
    ):
        x, y = data(cls, 20000, g)
        cpu = cls(D, K)
        cpu.fit(x, y, batch_size=7000)
        dev = cls(D, K).to(device)
        dev.fit(x.to(device), y.to(device), batch_size=7000)
        state_err = max(
            float((a.cpu().double() - b.double()).abs().max())
            for a, b in zip(dev.state_dict().values(), cpu.state_dict().values())
        )
        p_err = float((dev.predict_proba(x.to(device)).cpu() - cpu.predict_proba(x)).abs().max())
        xs, ys = dev.sample(1000, torch.Generator(device=device).manual_seed(0))
        assert xs.device.type == device.type and ys.device.type == device.type
        entry = {"max_state_diff": state_err, "max_proba_diff": p_err}
        if cls not in (QuadraticDiscriminantAnalysis, GaussianNB):
            lin = dev.to_linear()
            with torch.no_grad():
                lin_p = lin.predict_proba(x.to(device))
            entry["to_linear_max_diff"] = float(
                (
                    lin_p - dev.predict_proba(x.to(device))[:, 1:].squeeze(1)
                    if K == 2
                    else lin_p - dev.predict_proba(x.to(device))
                )
                .abs()
                .max()
            )
        if cls in (MultinomialNB, BernoulliNB, PoissonNB):
            sparse = cls(D, K).to(device)
            sparse.fit(x.to(device).to_sparse_csr(), y.to(device))
            entry["sparse_max_proba_diff"] = float(
                (sparse.predict_proba(x.to(device).to_sparse()) - dev.predict_proba(x.to(device))).abs().max()
            )
        big_x, big_y = data(cls, args.n, g)
        big_x, big_y = big_x.to(device), big_y.to(device)
        for dtype in (torch.float64, torch.float32):
            model = cls(D, K, dtype=dtype).to(device)
            xb = big_x.to(dtype)
            fitter_time = timed(lambda: model.fit(xb, big_y, batch_size=100_000), device)
            with torch.no_grad():
                predict_time = timed(lambda: model(xb), device)
            entry[f"fit_seconds_{str(dtype)[6:]}"] = fitter_time
            entry[f"forward_seconds_{str(dtype)[6:]}"] = predict_time
        report["models"][cls.__name__] = entry
        print(cls.__name__, json.dumps(entry))
        assert state_err < 1e-8 and p_err < 1e-8, (cls.__name__, state_err, p_err)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
