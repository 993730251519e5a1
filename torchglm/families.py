"""Exponential-family response distributions ``p(y | eta)``.

A family gives the per-sample negative log-likelihood on the eta scale, the
mean ``mu = g^{-1}(eta)`` through its link, the target checks, its canonical
link and the links it allows (seed 000, "Exponential families and GLM").
Each family is one class registered in :data:`FAMILIES`; an invalid
(family, link) pairing is an error that lists the valid links.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._validation import fail
from .links import Link, get_link

__all__ = ["Family", "Bernoulli", "Categorical", "FAMILIES", "get_family"]


class Family:
    """Base class of response families.

    Args:
        link: a link name from :data:`torchglm.links.LINKS` or a ``Link``;
            ``None`` takes the family's canonical link.

    Raises:
        InputError: if the link is not among ``allowed_links``.
    """

    name: str = ""
    canonical_link: str = ""
    allowed_links: tuple[str, ...] = ()
    #: classifiers predict labels; regression families predict the mean.
    is_classifier: bool = False
    #: True when eta has one column per class.
    multi_output: bool = False

    def __init__(self, link: str | Link | None = None):
        self.link = get_link(self.canonical_link if link is None else link)
        if self.link.name not in self.allowed_links:
            raise fail(
                f"link for family '{self.name}'",
                f"one of {list(self.allowed_links)}",
                repr(self.link.name),
            )

    @property
    def is_canonical(self) -> bool:
        return self.link.name == self.canonical_link

    def n_outputs(self, n_classes: int | None = None) -> int:
        """Number of columns of eta."""
        return 1

    def mean(self, eta: torch.Tensor) -> torch.Tensor:
        """``mu = g^{-1}(eta)``."""
        return self.link.inverse(eta)

    def nll(self, eta: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-sample negative log-likelihood ``-log p(y_i | eta_i)``, shape (n,)."""
        raise NotImplementedError

    def check_target(self, y: torch.Tensor, n_classes: int | None = None) -> torch.Tensor:
        """Validate targets; return them in the dtype ``nll`` expects."""
        raise NotImplementedError

    def predict(self, eta: torch.Tensor) -> torch.Tensor:
        """Point prediction: the label for classifiers, the mean otherwise."""
        return self.mean(eta)

    def variance(self, mu: torch.Tensor) -> torch.Tensor:
        """Variance function ``V(mu)``: ``Var[y] = phi V(mu)``."""
        raise NotImplementedError(f"family '{self.name}' defines no variance function")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(link={self.link.name!r})"


def _check_labels(y: torch.Tensor, n_classes: int) -> torch.Tensor:
    if y.dim() != 1:
        raise fail("y", "a 1-D tensor of class labels", f"shape {tuple(y.shape)}")
    if y.is_floating_point():
        if not bool(torch.isfinite(y).all()):
            raise fail("y", "finite class labels", "NaN or inf")
        if not bool((y == torch.round(y)).all()):
            raise fail("y", "integer class labels", "non-integer values")
    yl = y.long()
    if yl.numel() and (int(yl.min()) < 0 or int(yl.max()) >= n_classes):
        bad = yl[(yl < 0) | (yl >= n_classes)]
        raise fail("y", f"labels in {{0, ..., {n_classes - 1}}}", f"label {int(bad[0])}")
    return yl


class Bernoulli(Family):
    """``y in {0, 1}``, ``p(y|x) = mu^y (1 - mu)^{1-y}`` (logistic / probit regression).

    ``nll = -(y log mu + (1 - y) log(1 - mu))`` computed on the eta scale from
    the link's ``log_inverse``/``log1m_inverse`` (for the logit link this is
    ``binary_cross_entropy_with_logits``; for probit ``log_ndtr``).
    """

    name = "bernoulli"
    canonical_link = "logit"
    allowed_links = ("logit", "probit", "cloglog")
    is_classifier = True

    def nll(self, eta, y):
        y = y.to(eta.dtype)
        if self.link.name == "logit":
            return F.binary_cross_entropy_with_logits(eta, y, reduction="none")
        return -(y * self.link.log_inverse(eta) + (1 - y) * self.link.log1m_inverse(eta))

    def check_target(self, y, n_classes=None):
        return _check_labels(y, 2)

    def predict(self, eta):
        # mu > 1/2  <=>  eta > g(1/2), and g(1/2) = 0 for every symmetric link;
        # comparing mu keeps cloglog (g(1/2) != 0) right too.
        return (self.mean(eta) > 0.5).long()

    def variance(self, mu):
        return mu * (1 - mu)


class Categorical(Family):
    """``y in {0..K-1}``, ``p(C_k|x) = softmax(eta)_k`` (softmax regression, seed 000).

    ``nll = -log softmax(eta)_y`` via ``cross_entropy`` (a ``log_softmax``).
    """

    name = "categorical"
    canonical_link = "softmax"
    allowed_links = ("softmax",)
    is_classifier = True
    multi_output = True

    def n_outputs(self, n_classes=None):
        if n_classes is None or n_classes < 2:
            raise fail("n_classes", "an integer >= 2 for the categorical family", n_classes)
        return n_classes

    def nll(self, eta, y):
        return F.cross_entropy(eta, y, reduction="none")

    def check_target(self, y, n_classes=None):
        return _check_labels(y, n_classes)

    def predict(self, eta):
        return eta.argmax(dim=-1)


#: Registry of family names to classes.
FAMILIES: dict[str, type[Family]] = {cls.name: cls for cls in (Bernoulli, Categorical)}


def get_family(family: str | Family, link: str | Link | None = None) -> Family:
    """Return a family instance from a name in :data:`FAMILIES` or an instance."""
    if isinstance(family, Family):
        if link is not None and get_link(link) != family.link:
            raise fail("link", f"the family's own link {family.link.name!r}", repr(link))
        return family
    if isinstance(family, str) and family in FAMILIES:
        return FAMILIES[family](link)
    raise fail("family", f"one of {sorted(FAMILIES)}", repr(family))
