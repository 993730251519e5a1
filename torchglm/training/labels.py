"""A data module's targets, every row in file order: the target gate, the number of
classes, and labels turned into the codes ``0..n_classes-1`` (:class:`Targets`).

The gate is :func:`~torchglm._validation.check_targets`, the one ``model.fit`` uses,
applied to every row in file order, so its messages index rows as ``model.fit``'s do.
"""

from __future__ import annotations

from typing import Callable

import torch

from .._validation import check_targets, fail
from ..families import Family, get_family

__all__ = ["Targets"]


class Targets:
    """Every row's target and weight, and the original class labels.

    Args:
        y: targets of every row, in file order (float; labels as numbers or codes).
        weight: sample weights of every row, or ``None``.
        classes: the original labels of text classes, code ``k`` standing for
            ``classes[k]`` (``None``: the labels are numbers).

    Example:
        >>> t = Targets(torch.tensor([1.0, 2.0, 2.0]), None)
        >>> t.class_count(None), t.encode(2)(torch.tensor([2.0, 1.0])).tolist(), t.classes
        (2, [1.0, 0.0], [1, 2])
    """

    def __init__(self, y: torch.Tensor, weight: torch.Tensor | None, classes: list | None = None):
        self.y, self.weight, self.classes = y, weight, classes

    def class_count(self, declared: int | None) -> int:
        """The number of classes: the ``declared`` one, else the number of distinct labels
        (what a ``SoftmaxRegression`` without ``n_classes`` gets)."""
        if declared is not None:
            return declared
        if self.classes is not None:
            return len(self.classes)
        values = torch.unique(self.y)
        if values.numel() >= 2:
            return int(values.numel())
        # a single label: at least two classes, so that the gate reports the single class
        return max(int(float(values.max())) + 1, 2)

    def encode(self, n_classes: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """Turn numeric labels that are not the codes ``0..n_classes-1`` into codes:
        integer labels with exactly ``n_classes`` distinct values (``1``/``2``,
        ``-1``/``1``, ``3``/``5``/``7``) become the positions of their sorted values,
        kept in :attr:`classes` (scikit-learn's ``classes_``). Codes already in range
        (a declared class may be absent), non-integer labels and more distinct labels
        than classes are left to the target gate, which refuses the latter two.

        Returns:
            The map from labels to codes (already applied to :attr:`y`), for the
            splits' targets; ``None`` when the labels stay as they are.

        Raises:
            InputError: text labels of more classes than the model has.
        """
        if self.classes is not None:
            if len(self.classes) > n_classes:
                raise fail(
                    "y",
                    f"labels of {n_classes} classes (the model's n_classes)",
                    f"{len(self.classes)} distinct labels {self.classes[:10]}",
                )
            return None
        values = torch.unique(self.y)
        integers = bool((values == values.round()).all())
        in_range = bool(values.min() >= 0) and bool(values.max() < n_classes)
        if not integers or in_range or values.numel() != n_classes:
            return None
        self.classes = [int(v) for v in values.tolist()]

        def code(t: torch.Tensor) -> torch.Tensor:
            return torch.searchsorted(values, t.to(values.dtype)).to(t.dtype)

        self.y = code(self.y)
        return code

    def check_labels(
        self, task: str | None, declared: int | None, n_classes: int | None, family: Family | None
    ) -> tuple[int, Callable[[torch.Tensor], torch.Tensor] | None]:
        """Every row through ``family``'s target gate (by default the categorical one)
        as labels of ``n_classes`` classes (default: :meth:`class_count`), encoded first.

        Returns:
            ``(n_classes, code)``: ``code`` as :meth:`encode` returns it.

        Raises:
            InputError: regression data, a model's ``n_classes`` other than the
                ``declared`` one, non-integer labels, a label outside the classes.
        """
        if task == "regression":
            raise fail("task", "'classification' for a classifier", "'regression' data")
        if n_classes is None:  # setup checked y finite
            n_classes = self.class_count(declared)
        if declared is not None and n_classes != declared:
            raise fail("n_classes", f"{declared} (declared for the data)", f"{n_classes} (the model's)")
        code = self.encode(n_classes)
        family = get_family("categorical") if family is None else family
        # A single class or an empty declared class in the data read as model.fit would say it.
        check_targets(family, self.y, n_classes, self.weight, fitting=True)
        return n_classes, code

    def check_regression(self, task: str | None, family: Family | None, dtype: torch.dtype) -> None:
        """Real-valued targets, checked by ``family``'s target gate when given.

        Raises:
            InputError: classification data or text labels; targets outside
                ``family``'s support.
        """
        if task == "classification":
            raise fail("task", "'regression' for a regression family", "'classification' data")
        if self.classes is not None and isinstance(self.classes[0], str):
            raise fail(
                "y",
                "numeric targets for a regression family",
                f"text labels such as {self.classes[:3]} (a classifier takes them as classes)",
            )
        if family is not None:
            check_targets(family, self.y, None, self.weight, dtype=dtype)
