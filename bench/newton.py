"""Benchmark: torchglm's Newton-type solvers against scikit-learn, statsmodels and glum.

Every method minimizes the same objective, mean NLL + (alpha/2)||W||^2 with the
intercept unpenalized and alpha = 1e-4 (scikit-learn C = 1 / (alpha n), PoissonRegressor's alpha and glum's
alpha are ours), on six synthetic problems (two more, softmax with K = 100 and
K = 1,000 classes, run when named with --problems). Each method runs over a ladder of
tolerances, loosest first, and its time is that of the first run whose
objective (evaluated here in float64 numpy, independently of every library)
is within 1e-8 relative of the best objective any run reached. statsmodels'
Logit / Probit / MNLogit / GLM-IRLS have no L2 penalty: they are timed on their
own (unpenalized) problem and their objective gap on ours is reported.

The floor. A fit reads the data at least once per pass, so each problem also
measures one pass in float64 here: ``grad_pass_s`` (``eta = X w``, the family's
derivative, ``X^T r``) and ``hessian_gemm_s`` (``X^T [h X]``, the one GEMM of a
binary/Poisson Hessian, ``2 n d^2`` flops: its GFLOP/s rate is reported beside it);
``pass_s`` is their sum. Every method's time is also given in units of ``pass_s``
(``time_in_passes``), and torchglm's fits report the passes they took
(``passes``: its passes, the start pass that reads only the targets included, plus
one per Hessian-vector product of its CG solves, which reads the data as a pass does).

    python bench/newton.py            # the issue's sizes (several minutes on 2 cores)
    python bench/newton.py --quick    # n / 10, best of 3 runs, a few minutes
    python bench/newton.py --threads 1   # one thread everywhere (a shared, loaded machine)
    python bench/newton.py --methods torchglm --out /tmp/after.json   # torchglm only
    python bench/newton.py --torchglm /path/to/old/checkout --methods torchglm --out /tmp/before.json
    git worktree add /tmp/before 5ac7e1c && python bench/newton.py --torchglm /tmp/before ...

Writes bench/results/newton.json and prints a table per problem with the ratio
of each method's time to the fastest peer (a library other than torchglm).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings

import numpy as np
import torch
from scipy.special import gammaln, log_ndtr, logsumexp

ALPHA = 1e-4
REL = 1e-8

PROBLEMS = {
    "binary n=200k d=50": dict(kind="logit", n=200_000, d=50),
    "binary n=1M d=20": dict(kind="logit", n=1_000_000, d=20),
    "binary n=50k d=500": dict(kind="logit", n=50_000, d=500),
    "softmax K=10 n=100k d=100": dict(kind="softmax", n=100_000, d=100, K=10),
    "probit n=200k d=50": dict(kind="probit", n=200_000, d=50),
    "poisson n=500k d=30": dict(kind="poisson", n=500_000, d=30),
}
#: Run only when named with --problems (minutes per peer; an eta of n x K).
MANY_CLASSES = {
    "softmax K=100 n=100k d=100": dict(kind="softmax", n=100_000, d=100, K=100),
    "softmax K=1000 n=100k d=100": dict(kind="softmax", n=100_000, d=100, K=1000),
}


# -- data and the common objective ------------------------------------------------
def make_problem(kind, n, d, K=None, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    if kind == "poisson":  # bench/poisson.py's data
        w = rng.normal(0.0, 0.5 / np.sqrt(d), d)
        return X, rng.poisson(np.exp(0.5 + X @ w)).astype(np.float64)
    if kind == "softmax":
        W = rng.standard_normal((K, d)) / np.sqrt(d)
        eta = X @ W.T + rng.standard_normal(K) * 0.3
        P = np.exp(eta - logsumexp(eta, axis=1, keepdims=True))
        y = (P.cumsum(1) > rng.random((n, 1))).argmax(1)
        if K > 10:  # every class present (scikit-learn drops an absent one; K = 10 unchanged)
            y[:K] = np.arange(K)
    else:
        w = rng.standard_normal(d) / np.sqrt(d) * (2.0 if kind == "logit" else 1.0)
        eta = X @ w + 0.3
        if kind == "logit":
            p = 1 / (1 + np.exp(-eta))
        else:
            p = np.exp(log_ndtr(eta))
        y = (rng.random(n) < p).astype(np.int64)
    return X, y


def objective(kind, X, y, W, b):
    """Mean NLL + (alpha/2)||W||^2 in float64 numpy; W (m, d), b (m,)."""
    W = np.asarray(W, dtype=np.float64).reshape(-1, X.shape[1])
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    eta = X @ W.T + b
    if kind == "softmax":
        nll = logsumexp(eta, axis=1) - eta[np.arange(len(y)), y]
    elif kind == "poisson":
        eta = eta[:, 0]
        nll = np.exp(eta) - y * eta + gammaln(y + 1)
    else:
        eta = eta[:, 0]
        if kind == "logit":
            nll = np.logaddexp(0, eta) - y * eta
        else:
            nll = -(y * log_ndtr(eta) + (1 - y) * log_ndtr(-eta))
    return float(nll.mean() + 0.5 * ALPHA * (W * W).sum())


# -- methods: each returns (W, b, n_iter) or (W, b, n_iter, passes) ------------------
FAMILY_LINK = {
    "softmax": ("categorical", "softmax"),
    "poisson": ("poisson", "log"),
    "logit": ("bernoulli", "logit"),
    "probit": ("bernoulli", "probit"),
}


def torchglm_method(solver, dtype=None):
    from torchglm.models import GeneralizedLinearModel
    from torchglm.solvers import fit

    def run(kind, X, y, tol):
        K = int(y.max()) + 1 if kind == "softmax" else None
        fam, link = FAMILY_LINK[kind]
        m = GeneralizedLinearModel(X.shape[1], fam, link, n_classes=K, l2=ALPHA, dtype=torch.float64)
        x, t = torch.from_numpy(X), torch.from_numpy(y)
        opts = dict(gtol=tol, tol=0.0) if tol_kind(solver) == "gtol" else dict(tol=tol, gtol=0.0)
        r = fit(m, x, t, solver=solver, dtype=dtype, max_iter=5000, **opts)
        # (an older checkout's FitResult kept ``extra`` as a dict: bench/before_after.sh)
        extra = r.extra if isinstance(r.extra, dict) else vars(r.extra)
        # A CG iteration's Hessian-vector product reads the data as a pass does.
        passes = (extra.get("passes") or 0) + sum(extra.get("cg_iterations") or [])
        W, b = m.linear.weight.detach().numpy(), m.linear.bias.detach().numpy()
        return W, b, r.n_iter, passes, bool(r.converged)

    return run


def tol_kind(solver):
    return "gtol" if solver == "gd" else "tol"


def sklearn_method(solver):
    def run(kind, X, y, tol):
        from sklearn.linear_model import LogisticRegression

        sk = LogisticRegression(C=1.0 / (ALPHA * len(y)), solver=solver, tol=tol, max_iter=10_000)
        sk.fit(X, y)
        return sk.coef_, sk.intercept_, int(np.max(sk.n_iter_))

    return run


def sklearn_poisson_method(solver):
    def run(kind, X, y, tol):
        from sklearn.linear_model import PoissonRegressor

        sk = PoissonRegressor(alpha=ALPHA, solver=solver, tol=tol, max_iter=10_000)
        sk.fit(X, y)
        return sk.coef_[None, :], np.atleast_1d(sk.intercept_), int(sk.n_iter_)

    return run


def glum_probit_link():
    """glum ships no probit link: a small one from scipy's normal distribution."""
    from glum._link import Link
    from scipy.special import ndtr, ndtri

    def pdf(z):
        return np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)

    class ProbitLink(Link):
        def __eq__(self, other):
            return isinstance(other, ProbitLink)

        def link(self, mu):
            return ndtri(mu)

        def derivative(self, mu):
            return 1.0 / pdf(ndtri(mu))

        def inverse(self, lin_pred):
            eps50 = 50 * np.finfo(np.float64).eps
            return np.clip(ndtr(lin_pred), eps50, 1 - eps50)

        def inverse_derivative(self, lin_pred):
            return pdf(lin_pred)

        def inverse_derivative2(self, lin_pred):
            return -lin_pred * pdf(lin_pred)

    return ProbitLink()


def glum_method(solver):
    def run(kind, X, y, tol):
        # Imported here: a machine without glum records the peer as failed, not a crash.
        from glum import GeneralizedLinearRegressor

        family, link = ("poisson", "log") if kind == "poisson" else ("binomial", kind)
        link = glum_probit_link() if kind == "probit" else link
        g = GeneralizedLinearRegressor(
            family=family,
            link=link,
            alpha=ALPHA,
            l1_ratio=0.0,
            solver=solver,
            gradient_tol=tol,
            max_iter=1000,
        )
        g.fit(X, y.astype(np.float64))
        return g.coef_[None, :], np.atleast_1d(g.intercept_), int(g.n_iter_)

    return run


def statsmodels_method(which):
    def run(kind, X, y, tol):
        import statsmodels.api as sm

        Xc = sm.add_constant(X, prepend=False)
        if which == "glm-irls":
            if kind == "poisson":
                family = sm.families.Poisson()
            else:
                link = sm.families.links.Logit() if kind == "logit" else sm.families.links.Probit()
                family = sm.families.Binomial(link=link)
            res = sm.GLM(y, Xc, family=family).fit(tol=tol, maxiter=100)
            params, it = res.params, res.fit_history["iteration"]
            return params[None, :-1], params[-1:], it
        cls = {"logit": sm.Logit, "probit": sm.Probit, "softmax": sm.MNLogit}[kind]
        res = cls(y, Xc).fit(method="newton", tol=tol, maxiter=100, disp=0)
        it = res.mle_retvals.get("iterations", -1)
        if kind == "softmax":  # reference class 0: rows w_k - w_0, class 0 row is 0
            P = np.asarray(res.params)
            Wb = np.concatenate([np.zeros((1, P.shape[0])), P.T])
            return Wb[:, :-1], Wb[:, -1], it
        params = np.asarray(res.params)
        return params[None, :-1], params[-1:], it

    return run


def methods_for(kind, quick, K=None):
    ms = {
        "torchglm auto": (torchglm_method("auto"), [1e-8, 1e-10, 1e-12, 1e-14]),
        "torchglm newton": (torchglm_method("newton"), [1e-8, 1e-10, 1e-12, 1e-14]),
        "torchglm newton f32+polish": (torchglm_method("newton", torch.float32), [1e-8, 1e-10, 1e-12]),
        "torchglm newton-cg": (torchglm_method("newton-cg"), [1e-8, 1e-10, 1e-12, 1e-14]),
        "torchglm lbfgs": (torchglm_method("lbfgs"), [1e-8, 1e-10, 1e-12, 1e-14]),
    }
    if kind == "probit":
        ms["torchglm irls"] = (torchglm_method("irls"), [1e-8, 1e-10, 1e-12, 1e-14])
    if kind == "softmax":
        # The full (K d~)^2 Hessian costs K (K + 1) / 2 weighted products per pass.
        ms.pop("torchglm newton")
        ms.pop("torchglm newton f32+polish")
    if kind in ("logit", "softmax"):
        # Many classes: scikit-learn's Newton solvers form or iterate on (K d~)^2
        # (newton-cholesky took 13 s at K = 10); its lbfgs is the peer there.
        many = K is not None and K > 10
        for s in ("lbfgs",) if many else ("lbfgs", "newton-cholesky", "newton-cg"):
            ms[f"sklearn {s}"] = (sklearn_method(s), [1e-4, 1e-6, 1e-8, 1e-10])
    if kind == "poisson":
        for s in ("lbfgs", "newton-cholesky"):
            ms[f"sklearn {s}"] = (sklearn_poisson_method(s), [1e-4, 1e-6, 1e-8, 1e-10])
    if kind in ("logit", "probit", "poisson"):
        for s in ("irls-cd", "lbfgs"):
            ms[f"glum {s}"] = (glum_method(s), [1e-4, 1e-6, 1e-8, 1e-10])
        if kind != "poisson":  # statsmodels' discrete Poisson is the same fit as its GLM
            ms["statsmodels newton (no L2)"] = (statsmodels_method("newton"), [1e-8])
        ms["statsmodels GLM IRLS (no L2)"] = (statsmodels_method("glm-irls"), [1e-8])
    elif quick:
        ms["statsmodels MNLogit (no L2)"] = (statsmodels_method("newton"), [1e-8])
    return ms


def run_problem(name, spec, quick, budget_s, repeats, only=None):
    n = spec["n"] // 10 if quick else spec["n"]
    X, y = make_problem(spec["kind"], n, spec["d"], spec.get("K"))
    rows = {}
    methods = methods_for(spec["kind"], quick, spec.get("K"))
    if only:
        methods = {k: v for k, v in methods.items() if any(s in k for s in only)}
    # Warm-up on 500 rows: first-call costs (lazy imports, torch.func set-up) are not timed.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fn, ladder in methods.values():
            try:
                fn(spec["kind"], X[:500], y[:500], ladder[0])
            except Exception:
                pass  # the timed run below records the failure
    for label, (fn, ladder) in methods.items():
        runs = []
        for tol in ladder:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    walls = []
                    for _ in range(repeats):
                        t0 = time.perf_counter()
                        W, b, it, *more = fn(spec["kind"], X, y, tol)
                        walls.append(time.perf_counter() - t0)
                except Exception as e:  # a peer failing is a result, not a crash
                    runs.append(dict(tol=tol, error=f"{type(e).__name__}: {e}"[:200]))
                    break
                wall = min(walls)
            runs.append(
                dict(tol=tol, time_s=wall, n_iter=int(it), objective=objective(spec["kind"], X, y, W, b))
            )
            # torchglm's fits: their passes and whether they said converged=True
            runs[-1].update(zip(("passes", "converged"), more))
            if wall > budget_s:
                break
        rows[label] = runs
    best = min(r["objective"] for runs in rows.values() for r in runs if "objective" in r)
    floor = pass_floor(spec["kind"], X, spec.get("K"), repeats)
    table = {}
    for label, runs in rows.items():
        ok = [r for r in runs if "objective" in r and r["objective"] <= best + REL * abs(best)]
        last = runs[-1]
        entry = dict(runs=runs, reached=bool(ok))
        if ok:
            entry.update(time_s=ok[0]["time_s"], n_iter=ok[0]["n_iter"], tol=ok[0]["tol"])
            entry.update({k: ok[0][k] for k in ("passes", "converged") if k in ok[0]})
        elif "objective" in last:
            entry.update(
                gap=(last["objective"] - best) / abs(best), time_s=last["time_s"], n_iter=last["n_iter"]
            )
        if "time_s" in entry:
            entry["time_in_passes"] = entry["time_s"] / floor["pass_s"]
        table[label] = entry
    peers = [e["time_s"] for k, e in table.items() if not k.startswith("torchglm") and e["reached"]]
    fastest = min(peers) if peers else None
    for e in table.values():
        if fastest and e.get("reached"):
            e["ratio_to_fastest_peer"] = e["time_s"] / fastest
    return dict(
        n=n,
        d=spec["d"],
        K=spec.get("K"),
        kind=spec["kind"],
        best_objective=best,
        fastest_peer_s=fastest,
        floor=floor,
        methods=table,
    )


def pass_floor(kind, X, K, repeats):
    """One pass in float64 torch (module docstring): ``eta = X w``, the family's first
    derivative and ``X^T r`` (an ``n x K`` eta for the softmax); the Hessian GEMM
    ``X^T [h X]`` (``d x d``: one block of a softmax's ``K (K + 1) / 2``). Best of
    ``max(repeats, 3)``."""
    x = torch.from_numpy(X)
    n, d = x.shape
    W = torch.full((d, K or 1), 0.01, dtype=x.dtype)

    def grad_pass():
        eta = x @ W
        r = torch.softmax(eta, 1) if kind == "softmax" else torch.sigmoid(eta)
        return x.T @ r

    def hessian_gemm():
        # Over row chunks of 2^16 elements, as torchglm's passes run it on a CPU (the
        # scaled copy h X stays in cache; one whole n x d copy is slower).
        h = torch.sigmoid(x @ W[:, 0])
        out = torch.zeros(d, d, dtype=x.dtype)
        rows = max(256, 2**16 // d)
        for i in range(0, n, rows):
            xc = x[i : i + rows]
            out.addmm_(xc.T, xc * h[i : i + rows, None])
        return out

    def best(fn):
        walls = []
        for _ in range(max(repeats, 3)):
            t0 = time.perf_counter()
            fn()
            walls.append(time.perf_counter() - t0)
        return min(walls)

    g, h = best(grad_pass), best(hessian_gemm)
    return dict(grad_pass_s=g, hessian_gemm_s=h, pass_s=g + h, hessian_gflops=2 * n * d * d / h / 1e9)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="n / 10 on every problem")
    ap.add_argument("--problems", nargs="*", default=None, help="substrings of problem names to run")
    ap.add_argument(
        "--methods",
        nargs="*",
        default=None,
        help="substrings of method labels to run (e.g. torchglm: before/after runs)",
    )
    ap.add_argument(
        "--budget",
        type=float,
        default=30.0,
        help="stop a method's tolerance ladder after a run this long (s)",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="runs per setting, the minimum time is kept (default 3 quick, 1 full)",
    )
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "newton.json"))
    ap.add_argument(
        "--torchglm",
        default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        metavar="CHECKOUT",
        help="import torchglm from this checkout (default: the one this script is in, "
        "not the installed copy: an editable install of another worktree would win), "
        "e.g. another commit's for before/after runs",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="limit torch and BLAS (threadpoolctl) threads, e.g. 1 on a shared machine",
    )
    args = ap.parse_args()
    args.repeats = args.repeats or (3 if args.quick else 1)
    if args.torchglm:
        import sys

        # An editable install's import hook would win over sys.path: drop it.
        sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
        sys.path.insert(0, os.path.abspath(args.torchglm))
    if args.threads:
        from threadpoolctl import threadpool_limits

        torch.set_num_threads(args.threads)
        threadpool_limits(args.threads)
    out = dict(
        machine=dict(
            platform=platform.platform(),
            cpus=os.cpu_count(),
            torch=torch.__version__,
            threads=torch.get_num_threads(),
            torchglm=os.path.dirname(__import__("torchglm").__file__),
            loadavg=os.getloadavg(),
        ),
        alpha=ALPHA,
        rel=REL,
        quick=args.quick,
        repeats=args.repeats,
        problems={},
    )
    for name, spec in {**PROBLEMS, **MANY_CLASSES}.items():
        named = args.problems and any(p in name for p in args.problems)
        if (args.problems and not named) or (name in MANY_CLASSES and not named):
            continue
        res = run_problem(name, spec, args.quick, args.budget, args.repeats, args.methods)
        out["problems"][name] = res
        fl = res["floor"]
        print(f"\n{name} (n={res['n']}): best objective {res['best_objective']:.12g}")
        print(
            f"  one pass {fl['pass_s']:.4f} s = gradient pass {fl['grad_pass_s']:.4f} s + Hessian GEMM "
            f"{fl['hessian_gemm_s']:.4f} s ({fl['hessian_gflops']:.1f} GFLOP/s)"
        )
        print(
            f"  {'method':34s} {'time s':>8s} {'iters':>6s} {'passes':>6s} {'x pass':>7s} {'ratio':>7s}  note"
        )
        for label, e in sorted(res["methods"].items(), key=lambda kv: kv[1].get("time_s", 1e9)):
            ratio = f"{e['ratio_to_fastest_peer']:.2f}" if "ratio_to_fastest_peer" in e else "-"
            note = (
                f"tol {e['tol']:g}"
                if e["reached"]
                else (f"gap {e['gap']:.1e} (not reached)" if "gap" in e else e["runs"][-1].get("error", ""))
            )
            t = f"{e['time_s']:.3f}" if "time_s" in e else "-"
            xp = f"{e['time_in_passes']:.1f}" if "time_in_passes" in e else "-"
            print(
                f"  {label:34s} {t:>8s} {e.get('n_iter', '-')!s:>6s} {e.get('passes', '-')!s:>6s} "
                f"{xp:>7s} {ratio:>7s}  {note}"
            )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"\nwrote {args.out}; load average at start {out['machine']['loadavg']}")


if __name__ == "__main__":
    main()
