"""The scikit-learn ``check_estimator`` checks a torchglm estimator is known to fail,
with the reason: pass ``expected_failed_checks(est)`` to ``check_estimator`` or
``parametrize_with_checks`` (scikit-learn >= 1.6)."""

from __future__ import annotations

__all__ = ["expected_failed_checks"]


def expected_failed_checks(estimator) -> dict[str, str]:
    """``{check name: reason}`` for ``estimator``'s known ``check_estimator`` failures."""
    return {}
