"""torchglm.training.features: the one home of standardize -> basis."""

import numpy as np
import torch

from torchglm.training.features import feature_map, standardization, standardize


def test_standardization_is_centred_and_leaves_constant_columns_unscaled():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(500, 3, generator=g, dtype=torch.float32) * torch.tensor([1.0, 1e-3, 0.0]) + 1e4
    mean, scale = standardization(x)
    assert mean.dtype == scale.dtype == torch.float64
    x64 = x.double()
    torch.testing.assert_close(mean, x64.mean(0))
    # centred sums of squares: an offset of 1e4 with spread 1e-3 keeps its scale
    ref = ((x64 - x64.mean(0)) ** 2).mean(0).sqrt()
    torch.testing.assert_close(scale[:2], ref[:2], rtol=1e-10, atol=0)
    assert scale[2] == 1.0  # constant column: not divided by zero
    z = standardize(x, mean, scale, torch.float32)
    assert z.dtype == torch.float32 and torch.allclose(
        z[:, :2].double().std(0, unbiased=False), torch.ones(2, dtype=torch.float64), atol=1e-6
    )
    m0, s0 = standardization(x, enabled=False)
    assert torch.equal(standardize(x, m0, s0, torch.float64), x64)


def test_the_task_and_its_data_module_standardize_alike_and_callbacks_see_phi():
    """The task standardizes raw rows as its data module did (the same statistics,
    the same function), and feature_map is the task's phi (None without a basis)."""
    from functools import partial

    from torchglm.basis import Polynomial
    from torchglm.models import LogisticRegression
    from torchglm.training import GLMDataModule, GLMTask

    dm = GLMDataModule("gaussians2", dataset_options={"n_samples": 200})
    dm.setup("fit")
    raw = torch.randn(7, 2, dtype=torch.float64) * 4 + 3
    for basis in (None, Polynomial(2, include_bias=False)):
        task = GLMTask(partial(LogisticRegression, l2=1e-3), solver="newton", basis=basis)
        task.build(dm)
        torch.testing.assert_close(task.standardize(raw), dm.transform(raw), rtol=0, atol=0)
        z, _ = dm.split("train")
        phi = feature_map(task)
        if basis is None:
            assert phi is None and task.phi(z) is z
        else:
            assert phi(z).shape[1] == 5
            torch.testing.assert_close(phi(z), basis(z))


def test_label_codes_across_chunks():
    """Text seen only in a later chunk still codes the earlier rows; the classes are
    the sorted distinct labels, and numbers stay numbers."""
    import pandas as pd

    from torchglm.training.features import LabelCodes

    codes = LabelCodes()
    codes.add(pd.Series([2, 1, 2]))
    codes.add(pd.Series(["b", "1", "2"], dtype=object))
    y, classes = codes.result()
    assert classes == ["1", "2", "b"]
    np.testing.assert_array_equal(y, [1, 0, 1, 2, 0, 1])

    numbers = LabelCodes()
    numbers.add(pd.Series([0.5, 1.0]))
    numbers.add(pd.Series([3.0]))
    y, classes = numbers.result()
    assert classes is None
    np.testing.assert_array_equal(y, [0.5, 1.0, 3.0])
