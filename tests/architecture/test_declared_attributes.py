"""Links and families declare what the rest of the library branches on:
the declarations are checked here against the implementations, for every entry of
the registries, so a new link or family is checked for free."""

import pytest
import torch

from torchglm.families import FAMILIES, Family, get_family
from torchglm.links import LINKS, Link, get_link


@pytest.mark.parametrize("name", sorted(LINKS))
def test_restricts_eta_is_declared_where_valid_eta_is_overridden(name):
    link = get_link(name)
    assert link.restricts_eta == (type(link).valid_eta is not Link.valid_eta)


@pytest.mark.parametrize("name", sorted(LINKS))
def test_eta_is_log_odds_only_for_the_logistic_inverse(name):
    link = get_link(name)
    if link.multi_output:
        assert not link.eta_is_log_odds
        return
    eta = torch.linspace(-5, 5, 11, dtype=torch.float64)
    logistic = bool(torch.allclose(link.inverse(eta), torch.sigmoid(eta), rtol=1e-12, atol=0))
    assert link.eta_is_log_odds == logistic


def _families():
    for name, cls in sorted(FAMILIES.items()):
        for link in cls.allowed_links:
            yield name, link


@pytest.mark.parametrize("name,link", list(_families()))
def test_family_declarations(name, link):
    fam = get_family(name, link)
    assert fam.has_saturated_model == (type(fam).saturated_nll is not Family.saturated_nll)
    assert fam.least_squares == (name == "gaussian" and link == "identity")
