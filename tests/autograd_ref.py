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
            params[nm] = theta[i:i + sh.numel()].view(sh)
            i += sh.numel()
        nll = m.family.nll(functional_call(m, params, (x,)), y)
        data = nll.mean() if w is None else (w * nll).sum() / w.sum()
        W = params["linear.weight"]
        return data + 0.5 * m.l2 * (W * W).sum()

    return obj
