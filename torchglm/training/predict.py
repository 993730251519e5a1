"""``torchglm predict``: predictions of a run's model for the rows of a file.

    torchglm predict --run_dir RUN --input rows.csv --output preds.csv
    torchglm predict --ckpt_path RUN/model.ckpt --input rows.csv --output preds.npz

The model's features are found by **name** in files that name their columns (a
CSV header, NPZ column arrays, a structured ``.npy``; other columns such as the
target are ignored) and by **position** in files that do not (a CSV without a
header, an NPZ ``X`` array, a plain 2-D ``.npy``): then the file must have
exactly the model's number of columns. A CSV's first row is its header unless
every cell of it is a number (``--header``/``--no-header`` decide explicitly);
a UTF-8 byte-order mark is ignored.
"""

from __future__ import annotations

import argparse
import csv
import os
from pathlib import Path

import numpy as np
import torch

from .._validation import check_finite, fail
from ..data.files import read_table
from .checkpoints import load_checkpoint, model_checkpoint_of

__all__ = ["predict", "predict_main", "read_features"]


def _names(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    n = len(names)
    return f"[{shown}{', ...' if n > limit else ''}] ({n} column{'s' if n != 1 else ''})"


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def read_features(path: str | Path, features: list[str], header: bool | None = None) -> np.ndarray:
    """The model's feature columns of a CSV/NPZ/NPY file as an ``(n, d)`` float64 array.

    Args:
        path: the file.
        features: the model's feature names, in the model's order.
        header: for a CSV, whether the first row names the columns (``None``: it
            does unless every cell of it is a number).

    Raises:
        InputError: a missing file or a directory; a named file without one of the
            model's columns; an unnamed file whose width is not the model's.
    """
    path = Path(path)
    if path.is_dir():
        raise fail("input", "a data file", f"'{path}' (a directory)")
    if not path.is_file():
        raise fail("input", "an existing data file", f"'{path}' (not found)")
    d = len(features)
    if path.suffix.lower() == ".csv":
        return _read_csv(path, features, header)
    if path.suffix.lower() == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                x = z["X"] if "X" in z.files else None
        except (ValueError, OSError, EOFError, KeyError) as err:
            raise fail("input", "a readable .npz file", f"'{path}' ({type(err).__name__})") from None
        if x is not None and (x.ndim != 2 or x.shape[1] != d):
            raise fail(
                "input",
                f"an 'X' array with the model's {d} feature columns {_names(features)} "
                "(an unnamed array is matched by position)",
                f"'{path}' with X of shape {x.shape}",
            )
    elif path.suffix.lower() == ".npy":
        try:
            x = np.load(path, allow_pickle=False, mmap_mode="r")
        except (ValueError, OSError, EOFError) as err:
            raise fail("input", "a readable .npy file", f"'{path}' ({type(err).__name__})") from None
        if not x.dtype.names:
            if x.ndim != 2 or x.shape[1] != d:
                raise fail(
                    "input",
                    f"a 2-D array with the model's {d} feature columns {_names(features)} "
                    "(an unnamed array is matched by position)",
                    f"'{path}' of shape {x.shape}",
                )
            return np.asarray(x, dtype=np.float64)
    # Named columns (or an NPZ 'X' of the right width): the data reader selects them.
    return read_table(path, features=features, require_target=False).x


def _read_csv(path: Path, features: list[str], header: bool | None) -> np.ndarray:
    try:
        # utf-8-sig: a byte-order mark (Excel's "CSV UTF-8") is not part of the first name.
        with path.open(newline="", encoding="utf-8-sig") as fh:
            rows = [r for r in csv.reader(fh) if r and any(c.strip() for c in r)]
    except (OSError, UnicodeDecodeError) as err:
        raise fail("input", "a readable UTF-8 CSV file", f"'{path}' ({type(err).__name__})") from None
    if not rows:
        raise fail("input", "a CSV file with data rows", f"'{path}' (empty)")
    if header is None:
        header = not all(_is_number(c) for c in rows[0])
    d = len(features)
    if header:
        names = [c.strip() for c in rows[0]]
        rows = rows[1:]
        missing = [n for n in features if n not in names]
        if missing:
            raise fail(
                "input",
                f"the model's feature columns {_names(features)} (by name; --no-header "
                "to match them by position)",
                f"'{path}' with columns {_names(names)}, missing {_names(missing)}",
            )
        if len(set(names)) != len(names):
            raise fail("input", "unique column names", f"'{path}' with columns {_names(names)}")
        index = [names.index(n) for n in features]
        width = len(names)
    else:
        index, width = list(range(d)), len(rows[0])
        if width != d:
            raise fail(
                "input",
                f"the model's {d} feature columns {_names(features)} (a CSV without a "
                "header is matched by position)",
                f"'{path}' with {width} columns",
            )
    if not rows:
        raise fail("input", "at least one data row", f"'{path}' (only a header)")
    x = np.empty((len(rows), d))
    for i, row in enumerate(rows):
        line = i + 1 + bool(header)
        if len(row) != width:
            raise fail(f"input '{path}' line {line}", f"{width} comma-separated fields", len(row))
        for j, k in enumerate(index):
            try:
                x[i, j] = float(row[k])
            except ValueError:
                raise fail(
                    f"input '{path}' line {line} column '{features[j]}'", "a number", repr(row[k])
                ) from None
    return x


def predict(ckpt_path: str | Path, input: str | Path, output: str | Path, header: bool | None = None) -> Path:
    """Write predictions of a checkpointed model for the rows of a CSV/NPZ/NPY file.

    Features are standardized as in training. Classifiers get one probability
    column per class ``p_0..p_{K-1}`` and ``label``; regression models get
    ``mean``. A ``.npz`` output holds arrays ``proba``/``label`` (or ``mean``);
    anything else is written as CSV, atomically.

    Raises:
        InputError: an unreadable checkpoint or input, missing or extra unnamed
            columns, NaN/inf, an output path that cannot be written.
    """
    from .task import GLMTask  # Lightning, only when predicting

    load_checkpoint(ckpt_path)  # one clear error for a missing, truncated or foreign file
    try:
        task = GLMTask.load_from_checkpoint(ckpt_path, map_location="cpu", weights_only=False)
    except (TypeError, KeyError, RuntimeError) as err:
        raise fail(
            "ckpt_path",
            "a checkpoint written by train.py (its config rebuilds the model)",
            f"'{ckpt_path}' ({type(err).__name__})",
        ) from None
    task.eval()
    x = torch.as_tensor(read_features(input, task.feature_names, header), dtype=torch.float64)
    check_finite("X", x)
    mu = task.predict_proba(x)
    label = task.predict(x)
    if task.model.family.is_classifier:
        proba = mu if mu.dim() == 2 else torch.stack([1 - mu, mu], dim=1)
        columns = {f"p_{k}": proba[:, k] for k in range(proba.shape[1])} | {"label": label}
        arrays = {"proba": proba.numpy(), "label": label.numpy()}
    else:
        columns = {"mean": mu}
        arrays = {"mean": mu.numpy()}
    out = Path(output)
    if out.is_dir():
        raise fail("output", "a file path", f"'{out}' (a directory)")
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix.lower() == ".npz":
            with open(tmp, "wb") as fh:
                np.savez(fh, **arrays)
        else:
            with open(tmp, "w") as fh:
                fh.write(",".join(columns) + "\n")
                rows = zip(*(c.tolist() for c in columns.values()))
                fh.writelines(
                    ",".join(repr(v) if isinstance(v, float) else str(v) for v in r) + "\n" for r in rows
                )
        os.replace(tmp, out)
    except OSError as err:
        if tmp.is_file():
            tmp.unlink()
        raise fail("output", "a writable file path", f"'{out}' ({err.strerror})") from None
    return out


def predict_main(argv: list[str]) -> int:
    """``torchglm predict`` (``train.py predict``)."""
    parser = argparse.ArgumentParser(
        prog="torchglm predict",
        exit_on_error=False,
        description="Write predictions of a trained torchglm model.",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--run_dir", help="a finished run's directory: its model.ckpt is used")
    which.add_argument("--ckpt_path", help="a checkpoint written by train.py (e.g. RUN/model.ckpt)")
    parser.add_argument("--input", required=True, help="CSV/NPZ/NPY file with the feature columns")
    parser.add_argument("--output", required=True, help="output file (.csv or .npz)")
    parser.add_argument(
        "--header",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="whether a CSV's first row names its columns (default: yes unless it is all numbers)",
    )
    args = parser.parse_args(argv)
    ckpt = model_checkpoint_of(args.run_dir) if args.run_dir else args.ckpt_path
    out = predict(ckpt, args.input, args.output, header=args.header)
    print(f"predictions written to {out}")
    return 0
