"""The model's objective as a plain function of the flat parameters (through
``functional_call``): the autograd reference the solver tests compare against,
independent of the solvers' own derivative code."""

from torch.func import functional_call


def flat_objective(m, x, y, w=None):
    """``theta -> weighted mean NLL + (l2/2)||W||^2`` with ``theta`` in the order of
    ``m.named_parameters()`` (``[W.reshape(-1), b]``)."""
    names = [k for k, _ in m.named_parameters()]
    shapes = [p.shape for _, p in m.named_parameters()]

    def obj(theta):
        params, i = {}, 0
        for nm, sh in zip(names, shapes):
            params[nm] = theta[i : i + sh.numel()].view(sh)
            i += sh.numel()
        nll = m.family.nll(functional_call(m, params, (x,)), y)
        data = nll.mean() if w is None else (w * nll).sum() / w.sum()
        W = params["linear.weight"]
        return data + 0.5 * m.l2 * (W * W).sum()

    return obj


def newton_decrement(m, x, y, w=None):
    """``(E, lambda^2)`` at the model's parameters, independently of the solvers: the
    objective, gradient and Hessian from autograd (``torch.func``) in float64, and
    ``lambda^2 = g^T H^+ g`` from a pseudo-inverse of the Jacobi-equilibrated Hessian
    (zero-curvature directions, such as the softmax shift, do not count)."""
    import torch
    from torch.func import grad, hessian

    mm = copy_to_float64(m)
    x = x.to(torch.float64)
    y = y.to(torch.float64) if y.is_floating_point() else y
    w = None if w is None else w.to(torch.float64)
    f = flat_objective(mm, x, y, w)
    theta = torch.cat([p.detach().reshape(-1) for _, p in mm.named_parameters()])
    g, H = grad(f)(theta), hessian(f)(theta)
    d = H.diagonal().abs()
    d = torch.where(d > 0, d.rsqrt(), torch.ones_like(d))
    Hs = H * d[:, None] * d[None, :]
    dec = (d * g) @ torch.linalg.pinv(Hs, hermitian=True, rtol=1e-13) @ (d * g)
    return float(f(theta)), float(dec)


def copy_to_float64(m):
    import copy

    import torch

    mm = copy.deepcopy(m)
    return mm.to(torch.float64)


def assert_verified_optimum(m, x, y, result, w=None, tol=1e-12, slack=10.0):
    """A fit that claims convergence is at its optimum: the independent Newton decrement
    satisfies ``lambda^2 / 2 <= slack * tol * max(1, |E|)`` (``slack`` covers the
    rounding of a float32 model's parameters; pass a larger one for those)."""
    if not result.converged:
        return
    E, dec = newton_decrement(m, x, y, w)
    assert dec / 2 <= slack * tol * max(1.0, abs(E)), (
        f"{result.solver} claims convergence but lambda^2/2 = {dec / 2:.3g} at E = {E:.6g}: {result.message}"
    )
