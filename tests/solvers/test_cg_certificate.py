"""The Newton-CG certificate (torchglm/solvers/certify.py, ``ResidualBound``): where the
Hessian is not formed, ``converged=True`` rests on an upper bound of the Newton decrement
``lambda^2 = -2 m(x) + r^T H^+ r``, never on ``-g^T x`` alone.

Every exact value here comes from autograd (``torch.func.hessian`` of the objective as a
plain function of the flat parameters), independently of the solvers' own sums."""

import warnings

import pytest
import torch
from torch.func import hessian

from autograd_ref import flat_objective
from torchglm import ConvergenceWarning
from torchglm.data import TensorBatches
from torchglm.models import LogisticRegression, SoftmaxRegression
from torchglm.solvers import certify, fit
from torchglm.solvers.layout import flat_parameters
from torchglm.solvers.linalg import cg_solve, jacobi_preconditioner
from torchglm.solvers.pass_sums import PassSums
from torchglm.solvers.shift import SoftmaxShift

F64 = torch.float64


def _design(n, d, seed, ill=None):
    """A design; ``ill``: ``"scaled"`` (one column times 1e6) or ``"collinear"`` (the
    last column equal to the first up to 1e-5)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=F64)
    if ill == "scaled":
        x[:, 1] *= 1e6
    elif ill == "collinear":
        x[:, -1] = x[:, 0] + 1e-5 * torch.randn(n, generator=g, dtype=F64)
    return x, g


def _softmax_data(n, d, K, seed, ill=None):
    x, g = _design(n, d, seed, ill)
    W = torch.randn(K, d, generator=g, dtype=F64) / (1.0 if ill is None else x.std(0))
    y = torch.multinomial(torch.softmax(x @ W.T, 1), 1, generator=g).squeeze(1)
    return x, y


def _binary_data(n, d, seed, ill=None):
    x, g = _design(n, d, seed, ill)
    w = torch.randn(d, generator=g, dtype=F64) / (1.0 if ill is None else x.std(0))
    y = (torch.rand(n, generator=g, dtype=F64) < torch.sigmoid(x @ w)).to(F64)
    return x, y


def _hvp_sums(model, x, y, theta):
    s = PassSums(model, theta, "hvp")
    for batch in TensorBatches(x, y, batch_size=97):  # several batches: the sums add up
        s.add(batch)
    return s.finish()


def _exact_hessian(model, x, y, theta):
    return hessian(flat_objective(model, x, y))(theta)


CASES = {
    "binary l2": lambda ill: (LogisticRegression(6, l2=1e-3, dtype=F64), *_binary_data(300, 6, 0, ill)),
    "binary unpenalized": lambda ill: (LogisticRegression(6, dtype=F64), *_binary_data(300, 6, 1, ill)),
    "softmax l2": lambda ill: (
        SoftmaxRegression(4, 5, l2=1e-3, dtype=F64),
        *_softmax_data(300, 4, 5, 2, ill),
    ),
    "softmax unpenalized": lambda ill: (
        SoftmaxRegression(4, 5, dtype=F64),
        *_softmax_data(300, 4, 5, 3, ill),
    ),
}


@pytest.mark.parametrize("ill", [None, "scaled", "collinear"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_bound_is_above_the_exact_residual_term_and_decrement(case, ill):
    """At a point away from the optimum, for truncated CG steps of 1 to 4 products: the
    certificate's ``model`` is ``-2 m(x)`` of its (bias-corrected) step, its ``residual``
    bounds that step's ``r^T H^+ r`` from above, and so ``model + residual`` bounds the
    exact decrement ``g^T H^+ g`` (all from autograd's Hessian)."""
    model, x, y = CASES[case](ill)
    g = torch.Generator().manual_seed(7)
    theta = 0.3 * torch.randn(flat_parameters(model, F64).numel(), generator=g, dtype=F64)
    theta = theta / torch.cat([x.std(0).repeat(model.n_outputs), torch.ones(model.n_bias, dtype=F64)])
    s = _hvp_sums(model, x, y, theta)
    H = _exact_hessian(model, x, y, theta)
    Hp = torch.linalg.pinv(H, hermitian=True, rtol=1e-13)
    exact = float(s.grad @ Hp @ s.grad)
    shift = SoftmaxShift.of(model, F64, theta.device)
    pre = jacobi_preconditioner(s.diag)
    bound = certify.ResidualBound(s, shift, model.l2, pre)
    assert bound.kind is not None
    for n_cg in (1, 2, 4):
        step, _, _ = cg_solve(s.hvp, s.grad, s.diag, max_iter=n_cg, precondition=pre)
        step = step if shift is None else shift.remove(step)
        cert = bound.certificate(step)
        r = H @ cert.step + s.grad
        assert cert.model == pytest.approx(
            float(-2 * s.grad @ cert.step - cert.step @ H @ cert.step), rel=1e-6
        )
        true_residual = float(r @ Hp @ r)
        assert cert.residual >= true_residual * (1 - 1e-6), (n_cg, cert.residual, true_residual)
        assert cert.bound >= exact * (1 - 1e-6), (n_cg, cert.bound, exact)


def test_the_sums_of_the_stored_curvature_match_the_hessian():
    """``bias_block`` is the exact bias-bias block; for one output ``gram_floor`` is the
    data part of the Hessian itself, and for the softmax ``G (x) (I - 11^T/K)`` is below
    the Hessian (on every direction, as a quadratic form)."""
    model = SoftmaxRegression(3, 4, dtype=F64)
    x, y = _softmax_data(200, 3, 4, 5)
    theta = 0.4 * torch.randn(16, generator=torch.Generator().manual_seed(1), dtype=F64)
    s = _hvp_sums(model, x, y, theta)
    H = _exact_hessian(model, x, y, theta)
    torch.testing.assert_close(s.bias_block(), H[12:, 12:])
    G = s.gram_floor()
    K, d = 4, 3
    C = torch.eye(K, dtype=F64) - 1.0 / K
    # The flat order: weights (k, j) at k d + j, then the bias (k) at K d + k.
    M = torch.zeros_like(H)
    for k in range(K):
        for kk in range(K):
            idx = [k * d + j for j in range(d)] + [K * d + k]
            jdx = [kk * d + j for j in range(d)] + [K * d + kk]
            M[torch.tensor(idx).unsqueeze(1), torch.tensor(jdx)] = C[k, kk] * G
    assert float(torch.linalg.eigvalsh(H - M).min()) > -1e-12
    binary = LogisticRegression(3, l2=0.5, dtype=F64)
    xb, yb = _binary_data(200, 3, 6)
    tb = torch.tensor([0.3, -0.2, 0.1, 0.4], dtype=F64)
    sb = _hvp_sums(binary, xb, yb, tb)
    Hb = _exact_hessian(binary, xb, yb, tb)
    torch.testing.assert_close(
        sb.gram_floor() + 0.5 * torch.diag(torch.tensor([1.0, 1, 1, 0], dtype=F64)), Hb
    )
    torch.testing.assert_close(sb.bias_block(), Hb[3:, 3:])


def test_cg_continues_from_a_start_to_a_smaller_residual():
    """``cg_solve(start=(x0, H x0), target=t)`` ends with ``||H x + g||_P <= t``."""
    g = torch.Generator().manual_seed(0)
    A = torch.randn(30, 30, generator=g, dtype=F64)
    H = A @ A.T + 0.1 * torch.eye(30, dtype=F64)
    b = torch.randn(30, generator=g, dtype=F64)
    pre = jacobi_preconditioner(H.diagonal())
    x0, _, _ = cg_solve(lambda v: H @ v, b, H.diagonal(), max_iter=3)
    x, n, met = cg_solve(lambda v: H @ v, b, H.diagonal(), target=1e-9, start=(x0, H @ x0))
    r = H @ x + b
    assert met and n > 0 and float(r @ pre(r)) ** 0.5 <= 1e-9 * 1.01


# -- the fits ---------------------------------------------------------------------------
def _fit(model, x, y, solver, tol):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = fit(model, x, y, solver=solver, tol=tol)
    return r, [w.category for w in caught]


def _collinear_softmax(seed):
    """K = 10 classes of 5 features whose last equals the first up to 1e-3: the Hessian
    (K d~ = 60 parameters, ``d~ K (K + 1) / 2 = 330`` entries per sample) is not formed,
    so Newton-CG and L-BFGS's finish certify from Hessian-vector products."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(400, 4, generator=g, dtype=F64)
    x = torch.cat([x, x[:, :1] + 1e-3 * torch.randn(400, 1, generator=g, dtype=F64)], 1)
    W = torch.randn(10, 5, generator=g, dtype=F64)
    y = torch.multinomial(torch.softmax(x @ W.T, 1), 1, generator=g).squeeze(1)
    return x, y


@pytest.mark.parametrize("seed", range(3))
def test_no_false_optimum_from_a_cg_certificate(seed):
    """The regression: L-BFGS's Newton-CG finish (its residual floored at
    ``||r||_P^2 <= tol max(1,|E|) / 100``, on the assumption that the preconditioned
    curvature is O(1)) said converged=True 3e-8 to 1e-7 above the unpenalized optimum of
    nearly collinear columns, with tol = 1e-10 and E about 1.1 (hundreds of times the
    tolerance). A certified fit is now within the tolerance of exact Newton's optimum."""
    x, y = _collinear_softmax(seed)
    tol = 1e-10
    for l2 in (0.0, 1e-8):
        ref = fit(SoftmaxRegression(5, 10, l2=l2, dtype=F64), x, y, solver="newton", tol=1e-16)
        assert ref.converged
        r, caught = _fit(SoftmaxRegression(5, 10, l2=l2, dtype=F64), x, y, "lbfgs", tol)
        if r.converged:
            gap = r.extra["loss"] - ref.extra["loss"]
            assert gap <= tol * max(1.0, abs(r.extra["loss"])), (l2, gap, r.message)
            assert r.extra["cg_certificate"]["decrement_bound"] <= tol * max(1.0, abs(r.extra["loss"]))
        else:
            assert ConvergenceWarning in caught and "cannot certify" in r.message


@pytest.mark.parametrize("solver", ["newton-cg", "lbfgs"])
@pytest.mark.parametrize("l2", [1e-3, 0.0])
@pytest.mark.parametrize("ill", [None, "scaled", "collinear"])
def test_every_hvp_certificate_reaches_the_exact_optimum(solver, l2, ill):
    """Softmax with K = 10 of 4 features (330 Hessian entries per sample: the fits
    certify from Hessian-vector products): every converged=True is within
    ``tol max(1, |E|)`` of exact Newton's optimum and reports its bound; the
    well-conditioned fits do certify."""
    x, y = _softmax_data(500, 4, 10, 11, ill)
    tol = 1e-10
    ref = fit(SoftmaxRegression(4, 10, l2=l2, dtype=F64), x, y, solver="newton", tol=1e-16)
    r, caught = _fit(SoftmaxRegression(4, 10, l2=l2, dtype=F64), x, y, solver, tol)
    if ill is None:
        assert r.converged, r.message
    if r.converged:
        scale = max(1.0, abs(r.extra["loss"]))
        assert r.extra["loss"] - ref.extra["loss"] <= tol * scale, r.message
        cert = r.extra["cg_certificate"]
        assert cert["decrement_bound"] == pytest.approx(cert["step_part"] + cert["residual_bound"])
        assert cert["decrement_bound"] <= tol * scale and "bounding the residual" in r.message
    else:
        assert ConvergenceWarning in caught and "cannot certify" in r.message


def test_an_unpenalized_fit_without_a_bound_does_not_claim_convergence(monkeypatch):
    """No penalty and a design too wide for its Gram lower bound (here: the width limit
    lowered to 2 columns): the CG decrement alone certifies nothing, so the fit ends
    converged=False, saying what would certify."""
    monkeypatch.setattr(certify, "GRAM_MAX_WIDTH", 2)
    x, y = _softmax_data(300, 3, 10, 4)
    for solver in ("newton-cg", "lbfgs"):
        r, caught = _fit(SoftmaxRegression(3, 10, dtype=F64), x, y, solver, 1e-10)
        assert not r.converged and ConvergenceWarning in caught, r.message
        assert "cannot certify" in r.message and "4 > 2 columns" in r.message
        assert "an L2 penalty" in r.message and "solver='newton'" in r.message
        assert r.extra["cg_certificate"]["bound"] is None
        # The same fit with an L2 penalty certifies.
        r, _ = _fit(SoftmaxRegression(3, 10, l2=1e-3, dtype=F64), x, y, solver, 1e-10)
        assert r.converged and r.extra["cg_certificate"]["bound"] == certify.SCHUR


def test_a_bound_too_loose_after_tightening_refuses(monkeypatch):
    """A tiny penalty with no smaller-residual solves allowed (``TIGHTEN_MAX = 0``): the
    floored finishing step's ``||r'_w||^2 / l2`` stays above the tolerance, and the fit
    ends converged=False naming the bound and a larger penalty."""
    monkeypatch.setattr(certify, "TIGHTEN_MAX", 0)
    monkeypatch.setattr("torchglm.solvers.stepper.TIGHTEN_MAX", 0)
    x, y = _collinear_softmax(1)
    r, caught = _fit(SoftmaxRegression(5, 10, l2=1e-8, dtype=F64), x, y, "lbfgs", 1e-10)
    assert not r.converged and ConvergenceWarning in caught, r.message
    assert "a larger L2 penalty" in r.message and certify.SCHUR in r.message


@pytest.mark.parametrize("l2", [1e-3, 0.0])
def test_a_penalized_newton_cg_solve_stops_at_what_its_certificate_needs(l2, monkeypatch):
    """Newton-CG's own solves of a penalized fit (certified by the penalty's bound) stop
    at ``||r||_P^2 <= tol max(1,|E|) / 100`` instead of running the superlinear forcing
    to a residual far below what the certificate needs; an unpenalized fit's keep the
    forcing. The penalized fit still certifies within the tolerance of exact Newton."""
    from torchglm.solvers import stepper

    floors = []
    solve = stepper.cg_solve

    def recording(*args, **kwargs):
        if "target" not in kwargs:  # a step's solve, not a certificate's tightening
            floors.append(kwargs.get("floor", 0.0))
        return solve(*args, **kwargs)

    monkeypatch.setattr(stepper, "cg_solve", recording)
    x, y = _softmax_data(500, 4, 10, 11)
    tol = 1e-10
    r, _ = _fit(SoftmaxRegression(4, 10, l2=l2, dtype=F64), x, y, "newton-cg", tol)
    assert r.converged, r.message
    if l2 > 0:
        assert floors and all(f >= (0.01 * tol) ** 0.5 for f in floors)  # times sqrt(max(1, |E|))
        ref = fit(SoftmaxRegression(4, 10, l2=l2, dtype=F64), x, y, solver="newton", tol=1e-16)
        assert r.extra["loss"] - ref.extra["loss"] <= tol * max(1.0, abs(r.extra["loss"]))
    else:
        assert floors and all(f == 0.0 for f in floors)
