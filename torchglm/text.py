"""Bag of words: tokenize, build a vocabulary, count (the lecture notes on probabilistic
classification, §13: spam vs ham).

Under the bag-of-words hypothesis a document is the multiset of its terms
(the lecture notes, §1; Manning et al. §13.2), so it is represented by the
vector ``z`` of term counts ``z_k`` over a vocabulary: the input of
:class:`~torchglm.models.MultinomialNB` and of a logistic regression alike.

Example:
    >>> vocab = Vocabulary.from_texts(["win cash now", "see you now"], min_count=1)
    >>> vocab.tokens
    ['cash', 'now', 'see', 'win', 'you']
    >>> vocab.transform(["cash cash now"]).tolist()
    [[2.0, 1.0, 0.0, 0.0, 0.0]]
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable, Sequence

import torch

from ._validation import fail

__all__ = ["TOKEN_PATTERN", "tokenize", "Vocabulary"]

#: scikit-learn's default token pattern: runs of two or more word characters.
TOKEN_PATTERN = r"(?u)\b\w\w+\b"

_LAYOUTS = ("dense", "coo", "csr")


def tokenize(text: str, lowercase: bool = True, pattern: str = TOKEN_PATTERN) -> list[str]:
    """Split a text into tokens: the matches of ``pattern`` (after lowercasing).

    Same tokens as scikit-learn's ``CountVectorizer`` defaults.
    """
    if not isinstance(text, str):
        raise fail("text", "a str", type(text).__name__)
    return re.findall(pattern, text.lower() if lowercase else text)


class Vocabulary:
    """A fixed mapping from tokens to column indices, with counting.

    Args:
        tokens: the vocabulary, one column per token, in this order.
        lowercase: lowercase texts before tokenizing.
        pattern: the token regular expression.
    """

    def __init__(self, tokens: Sequence[str], lowercase: bool = True, pattern: str = TOKEN_PATTERN):
        tokens = list(tokens)
        if len(set(tokens)) != len(tokens):
            raise fail("tokens", "distinct tokens", f"{len(tokens) - len(set(tokens))} duplicates")
        self.tokens = tokens
        self.index = {t: i for i, t in enumerate(tokens)}
        self.lowercase = lowercase
        self.pattern = pattern

    @classmethod
    def from_texts(
        cls,
        texts: Iterable[str],
        min_count: int = 1,
        max_size: int | None = None,
        lowercase: bool = True,
        pattern: str = TOKEN_PATTERN,
    ) -> "Vocabulary":
        """Build a vocabulary from training texts.

        Args:
            texts: the training documents.
            min_count: keep tokens occurring at least this many times in total.
            max_size: keep at most this many tokens, the most frequent (ties by token).
            lowercase: lowercase before tokenizing.
            pattern: token regular expression.

        Returns:
            A vocabulary with tokens in alphabetical order (as scikit-learn's
            ``CountVectorizer``).
        """
        if not isinstance(min_count, int) or min_count < 1:
            raise fail("min_count", "a positive integer", min_count)
        if max_size is not None and (not isinstance(max_size, int) or max_size < 1):
            raise fail("max_size", "a positive integer or None", max_size)
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(tokenize(text, lowercase, pattern))
        kept = [(t, c) for t, c in counts.items() if c >= min_count]
        if max_size is not None:
            kept = sorted(kept, key=lambda tc: (-tc[1], tc[0]))[:max_size]
        if not kept:
            raise fail("texts", f"at least one token occurring >= {min_count} times", "none")
        return cls(sorted(t for t, _ in kept), lowercase, pattern)

    def __len__(self) -> int:
        return len(self.tokens)

    def transform(
        self, texts: Iterable[str], layout: str = "dense", dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        """Count matrix ``Z`` with ``Z[i, k]`` = occurrences of token ``k`` in text ``i``.

        Tokens outside the vocabulary are dropped.

        Args:
            texts: documents.
            layout: ``"dense"``, ``"coo"`` (``torch.sparse_coo``) or ``"csr"``
                (``torch.sparse_csr``).
            dtype: floating dtype of the counts (default: torch's default dtype).

        Returns:
            A (n_texts, len(self)) tensor.
        """
        if layout not in _LAYOUTS:
            raise fail("layout", f"one of {list(_LAYOUTS)}", repr(layout))
        dtype = torch.get_default_dtype() if dtype is None else dtype
        rows, cols, vals = [], [], []
        n = 0
        for i, text in enumerate(texts):
            n = i + 1
            counts = Counter(
                self.index[t] for t in tokenize(text, self.lowercase, self.pattern) if t in self.index
            )
            for k in sorted(counts):
                rows.append(i)
                cols.append(k)
                vals.append(counts[k])
        indices = torch.tensor([rows, cols], dtype=torch.long).reshape(2, -1)
        z = torch.sparse_coo_tensor(
            indices, torch.tensor(vals, dtype=dtype), (n, len(self)), check_invariants=True
        )
        z = z.coalesce()
        if layout == "dense":
            return z.to_dense()
        if layout == "csr":
            return z.to_sparse_csr()
        return z

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} tokens)"
