"""The checkpoints of a ``train.py`` run and how they are read back.

A run directory holds two:

* ``model.ckpt``: **the reported model**, the one ``metrics.json`` describes and
  ``train.py predict --run_dir RUN`` uses: for ``sgd`` the epoch with the lowest
  validation loss, for pass-based solvers (Newton, IRLS, L-BFGS, closed forms) the
  solver's final estimate. It is written once, when the run has succeeded.
* ``checkpoints/last.ckpt``: the state after the last completed epoch (weights,
  optimizer or solver state, loops), written after **every** epoch by
  :class:`LastCheckpoint`, for ``--resume``. It is a training state, not a result.

**Loading a checkpoint never runs code.** Checkpoints are files people share, and
a pickle can call any function while it is read. So a checkpoint holds tensors and
plain data only (numbers, strings, lists, dicts: :func:`plain` makes what we write
so), is read with ``torch.load(weights_only=True)``, which refuses every other
pickled object, and its hyper-parameters may name only classes that can be
instantiated without importing new code (:func:`check_hyper_parameters`): a
``class_path`` is data too, and a loader that imports and calls whatever it names
runs code as surely as a pickle does.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import io
import os
import pickle
import re
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Checkpoint
from torch import nn
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

from .._validation import InputError, existing_file, fail

__all__ = [
    "MODEL_CKPT",
    "LastCheckpoint",
    "check_hyper_parameters",
    "checkpoint_bytes",
    "load_checkpoint",
    "model_checkpoint_of",
    "plain",
    "read_checkpoint",
]

#: The reported model's file name in the run directory.
MODEL_CKPT = "model.ckpt"


class LastCheckpoint(Checkpoint):
    """Write ``dirpath/last.ckpt`` after every training epoch (atomically: a
    temporary file renamed into place, so a kill leaves the previous one whole).

    Lightning's ``ModelCheckpoint(save_last=True)`` writes ``last.ckpt`` only in
    some versions and configurations (2.6 only together with a new best), so the
    resume state is written here explicitly. As a :class:`Checkpoint` it runs after
    the task's own ``on_train_epoch_end``, so the epoch's history is included.

    Args:
        dirpath: directory of ``last.ckpt``.
    """

    def __init__(self, dirpath: str | Path):
        self.dirpath = Path(dirpath)

    @property
    def path(self) -> Path:
        return self.dirpath / "last.ckpt"

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._save(trainer)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Once more after the other callbacks' on_fit_end (Checkpoint callbacks run
        # last): what they add to a checkpoint (e.g. a posterior) is in last.ckpt too.
        if not trainer.interrupted:
            self._save(trainer)

    def _save(self, trainer: pl.Trainer) -> None:
        tmp = self.dirpath / f".last.ckpt.tmp-{os.getpid()}"
        trainer.save_checkpoint(tmp)
        if trainer.is_global_zero:
            os.replace(tmp, self.path)
        trainer.strategy.barrier("last_checkpoint")


def model_checkpoint_of(run_dir: str | Path) -> Path:
    """The reported model of a run directory (``RUN/model.ckpt``).

    Raises:
        InputError: ``run_dir`` is not a finished run's directory.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise fail("run_dir", "the directory of a finished train.py run", f"'{run_dir}' (not a directory)")
    path = run_dir / MODEL_CKPT
    if not path.is_file():
        raise fail(
            "run_dir", f"a finished run's directory (with {MODEL_CKPT})", f"'{run_dir}' without {MODEL_CKPT}"
        )
    return path


def load_checkpoint(path: str | Path, name: str = "ckpt_path") -> dict[str, Any]:
    """Read a checkpoint written by ``train.py`` on the CPU, without running code
    (:func:`read_checkpoint` of :func:`checkpoint_bytes`).

    Raises:
        InputError: the file is missing, a directory, truncated, not a checkpoint,
            a checkpoint not written by ``train.py``, or one that holds pickled
            Python objects or names classes that loading it would import.
    """
    return read_checkpoint(checkpoint_bytes(path, name), path, name)


def checkpoint_bytes(path: str | Path, name: str = "ckpt_path") -> bytes:
    """The bytes of a checkpoint file (read once: what is checked is what is loaded).

    Raises:
        InputError: the file is missing, a directory or unreadable.
    """
    path = existing_file(name, path, "checkpoint file")
    try:
        return path.read_bytes()
    except OSError as err:
        raise fail(name, "a readable checkpoint file", f"'{path}' ({err.strerror})") from None


def read_checkpoint(data: bytes, path: str | Path, name: str = "ckpt_path") -> dict[str, Any]:
    """Unpickle a ``train.py`` checkpoint's bytes with ``torch.load(weights_only=True)``
    and check what it holds: the ``torchglm`` record (feature count and names, dtype)
    and hyper-parameters that name only safe classes (:func:`check_hyper_parameters`).

    Args:
        data: the file's bytes (read once: what is checked is what is loaded).
        path: where they came from, for messages.
        name: the argument that named the file, for messages.

    Raises:
        InputError: as :func:`load_checkpoint`.
    """
    try:
        # weights_only=True: tensors and plain containers only; any other pickled
        # object (whose unpickling could call any function) is refused unread.
        ckpt = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        objects = _pickled_objects(data)
        if objects:
            raise fail(
                name,
                "a checkpoint of tensors and plain data (loading one never runs code)",
                f"'{path}' (it holds pickled Python objects: {', '.join(objects[:4])}; refused unread)",
            ) from None
        raise fail(
            name, "a checkpoint written by train.py", f"'{path}' (unreadable: UnpicklingError)"
        ) from None
    except (
        OSError,
        EOFError,
        RuntimeError,
        ValueError,
        zipfile.BadZipFile,
        AttributeError,
        ImportError,
        IndexError,
        KeyError,
        TypeError,
    ) as err:
        what = "empty" if not data else f"unreadable: {type(err).__name__}"
        raise fail(name, "a checkpoint written by train.py", f"'{path}' ({what})") from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("torchglm"), dict) or "state_dict" not in ckpt:
        raise fail(name, "a checkpoint written by train.py", f"'{path}' (another kind of file)")
    _check_record(ckpt["torchglm"], path, name)
    check_hyper_parameters(ckpt.get("hyper_parameters") or {}, path, name)
    return ckpt


def _pickled_objects(data: bytes) -> list[str]:
    """The globals (``module.name``) a pickle would import and call, found by reading
    its opcodes (nothing is unpickled)."""
    try:
        return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data)))
    except Exception:  # noqa: BLE001 - a file too broken to list: reported as unreadable
        return []


#: The dtypes a train.py checkpoint's data (and model) may have.
DTYPES = {name: getattr(torch, name) for name in ("float16", "bfloat16", "float32", "float64")}


def _check_record(record: dict[str, Any], path, name: str) -> None:
    """The ``torchglm`` record rebuilds the model: its feature counts, names and dtype."""

    def bad(what: str) -> InputError:
        return fail(name, "a checkpoint written by train.py", f"'{path}' ({what})")

    for key in ("n_features_in", "n_features"):
        n = record.get(key)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise bad(f"{key} {n!r}, not a positive integer")
    names = record.get("feature_names")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise bad("feature_names is not a list of strings")
    if record.get("dtype") not in DTYPES:
        raise bad(f"dtype {record.get('dtype')!r}, not one of {', '.join(DTYPES)}")


# -- the hyper-parameters ---------------------------------------------------------------

#: The task's arguments that name a class to instantiate (jsonargparse imports a
#: ``class_path`` and calls it), and the base class each must extend.
CLASS_ARGUMENTS: dict[str, tuple[type, ...]] = {
    "model": (nn.Module,),
    "basis": (nn.Module,),
    "optimizer": (torch.optim.Optimizer,),
    "lr_scheduler": (LRScheduler, ReduceLROnPlateau),
}

#: The instantiators Lightning's ``load_from_checkpoint`` may call (LightningCLI's).
_INSTANTIATORS = ("pytorch_lightning.cli.instantiate_module", "lightning.pytorch.cli.instantiate_module")

_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def check_hyper_parameters(hparams: Any, path: str | Path, name: str = "ckpt_path") -> None:
    """Refuse hyper-parameters whose loading would run code that is not already loaded.

    ``GLMTask.load_from_checkpoint`` rebuilds the task from its hyper-parameters with
    LightningCLI's instantiator, which imports every ``class_path`` (and a dotted
    string given for a callable) and calls it with its ``init_args``: a checkpoint of
    plain data naming ``os.system`` would run a shell command. So every class a
    checkpoint names must be one of torchglm's own or come from a module already
    imported (the user's own classes: import their module before loading), it must
    be a class (never a function), and the model, basis, optimizer and scheduler
    must extend ``nn.Module``, ``nn.Module``, ``Optimizer`` and ``LRScheduler``; any
    other dotted string must not name a module that is not imported yet.

    Raises:
        InputError: a hyper-parameter that breaks these rules.
    """

    def bad(what: str) -> InputError:
        return fail(
            name,
            "hyper-parameters naming only torchglm's classes or ones already imported "
            "(loading a checkpoint never imports or runs new code)",
            f"'{path}' ({what})",
        )

    if not isinstance(hparams, dict):
        raise bad(f"hyper_parameters of type {type(hparams).__name__}")
    for key, value in hparams.items():
        if key == "_instantiator":
            if value not in _INSTANTIATORS:
                raise bad(f"_instantiator {value!r}")
        elif not isinstance(key, str) or key.startswith("_"):
            raise bad(f"hyper-parameter {key!r}")
        elif key in CLASS_ARGUMENTS:
            _check_class(value, CLASS_ARGUMENTS[key], key, bad)
        else:
            _check_values(value, key, bad)


def _check_class(value: Any, bases: tuple[type, ...], where: str, bad) -> None:
    """A ``class_path`` config (or a dotted class name) of a subclass of ``bases``."""
    if value is None:
        return
    if isinstance(value, str):
        class_path, init = value, {}
    elif isinstance(value, dict) and isinstance(value.get("class_path"), str):
        extra = set(value) - {"class_path", "init_args", "dict_kwargs"}
        if extra:
            raise bad(f"{where} with keys {sorted(extra)}")
        class_path, init = value["class_path"], value
    else:
        raise bad(f"{where} {_short(value)}, not a class_path config")
    obj = _resolve(class_path, where, bad)
    if not isinstance(obj, type) or not issubclass(obj, bases):
        kinds = " or ".join(b.__name__ for b in bases)
        raise bad(f"{where} class_path '{class_path}' is not a class extending {kinds}")
    for part in ("init_args", "dict_kwargs"):
        args = init.get(part)
        if args is not None and not isinstance(args, dict):
            raise bad(f"{where}.{part} {_short(args)}, not a dict")
        _check_values(args, f"{where}.{part}", bad)


def _check_values(value: Any, where: str, bad) -> None:
    """Plain values only. A ``class_path`` config is refused here: only the arguments
    of :data:`CLASS_ARGUMENTS` name classes, each checked against its base; under an
    argument typed ``Any`` (``solver_options``) the instantiator would build any class
    named, e.g. ``subprocess.Popen`` with ``shell=True``. A dotted string must not name
    a module that is not imported yet, nor a callable outside torchglm (a parser
    resolves such a string to the function for an argument typed ``Callable``)."""
    if isinstance(value, dict):
        if "class_path" in value:
            raise bad(f"{where} is a class_path config (only {', '.join(CLASS_ARGUMENTS)} name classes)")
        for k, v in value.items():
            _check_values(v, f"{where}.{k}", bad)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_values(v, f"{where}[{i}]", bad)
    elif isinstance(value, str) and _DOTTED.fullmatch(value):
        module = value.rpartition(".")[0]
        top = module.split(".")[0]
        # Only a string that names an installed module could be imported; other
        # dotted strings ("train.csv") are plain data.
        if not _loaded(module):
            if importlib.util.find_spec(top) is not None:
                raise bad(f"{where} '{value}' names the module '{module}', which is not imported")
        elif not (module == "torchglm" or module.startswith("torchglm.")) and callable(
            getattr(sys.modules.get(module), value.rpartition(".")[2], None)
        ):
            raise bad(f"{where} '{value}' names a callable outside torchglm")


def _loaded(module: str) -> bool:
    """Whether importing ``module`` runs no new code: it is imported already, or it is
    part of torchglm (the library doing the loading)."""
    return module in sys.modules or module == "torchglm" or module.startswith("torchglm.")


def _resolve(class_path: str, where: str, bad) -> Any:
    if not _DOTTED.fullmatch(class_path):
        raise bad(f"{where} class_path {class_path!r}, not a dotted module.name path")
    module, _, attr = class_path.rpartition(".")
    if not _loaded(module):
        raise bad(
            f"{where} class_path '{class_path}': its module '{module}' is not imported "
            "(import it before loading the checkpoint)"
        )
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        raise bad(f"{where} class_path '{class_path}' not found") from None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- writing ------------------------------------------------------------------------------


#: what :func:`_plain_leaf` returns for a value that is not a leaf (``None`` is one).
_NOT_A_LEAF = object()


def _plain_leaf(value: Any) -> Any:
    """A value without items as plain data (see :func:`plain`), or :data:`_NOT_A_LEAF`."""
    if value is None or isinstance(value, (torch.Tensor, torch.dtype, torch.device, torch.Size)):
        return value
    if isinstance(value, np.generic) and not isinstance(value, np.object_):
        return value.item()  # before float: np.float64 is a float subclass, pickled as NumPy's
    for kind in (bool, int, float, complex, str, bytes):
        if isinstance(value, kind):
            # the builtin itself, not a subclass (an IntEnum, a str Enum) pickled by its class
            if type(value) is kind:
                return value
            return str.__str__(value) if kind is str else kind(value)  # str(e) of an Enum is its name
    if isinstance(value, np.ndarray) and value.dtype != object:
        return torch.from_numpy(np.array(value))
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return _NOT_A_LEAF


def plain(value: Any, where: str = "checkpoint") -> Any:
    """``value`` as data that ``torch.load(weights_only=True)`` reads back: tensors,
    numbers, strings, ``torch.dtype``/``device``/``Size``, and lists, tuples, sets and
    dicts of them. Dataclasses and namespaces become dicts, NumPy scalars Python
    numbers, NumPy arrays tensors, paths strings, tuple and dict subclasses (a
    ``namedtuple``, an ``OrderedDict``) plain tuples and dicts.

    Raises:
        TypeError: any other object (it would need a pickle, and pickles run code).
    """
    leaf = _plain_leaf(value)
    if leaf is not _NOT_A_LEAF:
        return leaf
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif isinstance(value, argparse.Namespace):
        value = vars(value)
    if isinstance(value, Mapping):
        return {plain(k, where): plain(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, (set, frozenset)):
        return {plain(v, where) for v in value}
    raise TypeError(
        f"{where}: a {type(value).__module__}.{type(value).__qualname__} is not plain data (tensors, "
        "numbers, strings, lists, dicts); a checkpoint holding it could not be loaded without running code"
    )
