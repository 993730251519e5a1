"""Before/after of ``auto`` on bench/newton.py's problems in CPU time, for a loaded machine.

Each (checkout, problem) runs in its own process, one thread, the two checkouts
alternating for ``--rounds`` rounds; a process times ``--repeats`` fits of ``auto``
(tol 1e-8) and of the problem's fastest peer at the tolerance bench/newton.py found it
needs (scikit-learn lbfgs, glum lbfgs for probit) in the same process, and keeps the
least CPU time (``time.process_time``: on a machine shared with other busy processes,
wall time measures the queue). It records the passes (Hessian-vector products
included), the objective in float64 numpy (bench/newton.py's ``objective``) and the
ratio of CPU times.

    python bench/auto_ab.py --before /tmp/before --problems probit poisson "50k"
    git worktree add /tmp/before 08f0462   # the checkout to compare with

Writes bench/results/auto_ab.json (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def child(checkout: str, name: str, repeats: int) -> dict:
    """One process: ``auto`` and the peer on one problem, the least CPU time of each."""
    sys.path.insert(0, checkout)
    sys.path.insert(0, HERE)
    import warnings

    import torch
    from threadpoolctl import threadpool_limits

    import newton as B
    import torchglm
    from torchglm.models import GeneralizedLinearModel
    from torchglm.solvers import fit

    assert torchglm.__file__.startswith(os.path.abspath(checkout)), torchglm.__file__
    torch.set_num_threads(1)
    threadpool_limits(1)
    spec = next(v for k, v in B.PROBLEMS.items() if name in k)
    X, y = B.make_problem(spec["kind"], spec["n"], spec["d"], spec.get("K"))
    fam, link = B.FAMILY_LINK[spec["kind"]]
    kind = spec["kind"]

    def ours():
        m = GeneralizedLinearModel(
            X.shape[1], fam, link, n_classes=spec.get("K"), l2=B.ALPHA, dtype=torch.float64
        )
        r = fit(m, torch.from_numpy(X), torch.from_numpy(y), solver="auto", tol=1e-8, gtol=0.0, max_iter=5000)
        W, b = m.linear.weight.detach().numpy(), m.linear.bias.detach().numpy()
        passes = r.extra.passes + sum(r.extra.cg_iterations or [])
        return dict(passes=passes, converged=bool(r.converged), objective=B.objective(kind, X, y, W, b))

    if kind == "poisson":
        peer, label, ptol = B.sklearn_poisson_method("lbfgs"), "sklearn lbfgs", 1e-4
    elif kind == "probit":
        peer, label, ptol = B.glum_method("lbfgs"), "glum lbfgs", 1e-6
    else:
        peer, label, ptol = B.sklearn_method("lbfgs"), "sklearn lbfgs", 1e-6

    def theirs():
        W, b, *_ = peer(kind, X, y, ptol)
        return dict(objective=B.objective(kind, X, y, W, b))

    warnings.simplefilter("ignore")
    ours(), theirs()  # first-call costs are not timed
    cpu = {"auto": [], "peer": []}
    wall = {"auto": [], "peer": []}
    out = {}
    for _ in range(repeats):
        for tag, f in (("auto", ours), ("peer", theirs)):
            c0, w0 = time.process_time(), time.perf_counter()
            out[tag] = f()
            cpu[tag].append(time.process_time() - c0)
            wall[tag].append(time.perf_counter() - w0)
    return dict(
        checkout=checkout,
        problem=name,
        peer=f"{label} tol {ptol:g}",
        auto=out["auto"],
        peer_objective=out["peer"]["objective"],
        auto_cpu_s=min(cpu["auto"]),
        peer_cpu_s=min(cpu["peer"]),
        auto_wall_s=min(wall["auto"]),
        peer_wall_s=min(wall["peer"]),
        ratio_cpu=min(cpu["auto"]) / min(cpu["peer"]),
        load=os.getloadavg(),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="the checkout to compare with (a git worktree; required)")
    ap.add_argument("--after", default=os.path.dirname(HERE), help="default: this checkout")
    ap.add_argument("--problems", nargs="+", default=["probit", "poisson", "50k"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "auto_ab.json"))
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], int(args.child[2]))))
        return
    if not args.before:
        ap.error("--before is required")
    runs = []
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in args.problems:
        for _ in range(args.rounds):
            for which, checkout in (("before", args.before), ("after", args.after)):
                cmd = [
                    sys.executable,
                    __file__,
                    "--child",
                    os.path.abspath(checkout),
                    name,
                    str(args.repeats),
                ]
                rec = json.loads(
                    subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
                )
                rec["which"] = which
                runs.append(rec)
                print(
                    f"{name:10s} {which:6s} passes {rec['auto']['passes']:3d}  auto {rec['auto_cpu_s']:.3f} s  "
                    f"peer {rec['peer_cpu_s']:.3f} s  ratio {rec['ratio_cpu']:.2f}  load {rec['load'][0]:.1f}",
                    flush=True,
                )
    with open(args.out, "w") as f:
        json.dump(dict(before=args.before, after=args.after, runs=runs), f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
