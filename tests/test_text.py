"""Bag of words: tokens and counts against scikit-learn's CountVectorizer."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from sklearn.feature_extraction.text import CountVectorizer

from torchglm import InputError
from torchglm.text import Vocabulary, tokenize

TEXTS = [
    "WINNER!! You have won a 1000 cash prize. Call 09061701461 now",
    "Ok lar... Joking wif u oni... call me later",
    "Free entry in 2 a wkly comp to win cash, text WIN to 87121",
    "I'll call you later, ok? Café at 5",
    "cash cash CASH",
]


def test_tokenize_matches_countvectorizer():
    analyzer = CountVectorizer().build_analyzer()
    for text in TEXTS:
        assert tokenize(text) == analyzer(text)
    assert tokenize("Ab ab", lowercase=False) == ["Ab", "ab"]
    with pytest.raises(InputError, match="text"):
        tokenize(3)


@pytest.mark.parametrize("layout", ["dense", "coo", "csr"])
def test_counts_match_countvectorizer(layout):
    vocab = Vocabulary.from_texts(TEXTS)
    ref = CountVectorizer().fit(TEXTS)
    assert vocab.tokens == list(ref.get_feature_names_out())
    z = vocab.transform(TEXTS, layout=layout)
    expected_layout = {"dense": torch.strided, "coo": torch.sparse_coo, "csr": torch.sparse_csr}[layout]
    assert z.layout == expected_layout and z.shape == (len(TEXTS), len(vocab))
    np.testing.assert_array_equal(z.to_dense().numpy(), ref.transform(TEXTS).toarray())


def test_min_count_and_max_size():
    counts = Counter(t for text in TEXTS for t in tokenize(text))
    vocab = Vocabulary.from_texts(TEXTS, min_count=2)
    assert vocab.tokens == sorted(t for t, c in counts.items() if c >= 2)
    assert "cash" in vocab.tokens and "joking" not in vocab.tokens
    top = Vocabulary.from_texts(TEXTS, max_size=3)
    assert top.tokens == sorted(t for t, _ in sorted(counts.items(), key=lambda tc: (-tc[1], tc[0]))[:3])
    # unknown tokens are dropped
    np.testing.assert_array_equal(
        vocab.transform(["zebra cash"]).numpy()[0], [1.0 if t == "cash" else 0.0 for t in vocab.tokens]
    )


def test_vocabulary_errors():
    with pytest.raises(InputError, match="min_count"):
        Vocabulary.from_texts(TEXTS, min_count=0)
    with pytest.raises(InputError, match="max_size"):
        Vocabulary.from_texts(TEXTS, max_size=0)
    with pytest.raises(InputError, match="texts"):
        Vocabulary.from_texts(TEXTS, min_count=1000)
    with pytest.raises(InputError, match="distinct"):
        Vocabulary(["a", "a"])
    with pytest.raises(InputError, match="layout"):
        Vocabulary(["a"]).transform(["a"], layout="csc")


def test_empty_documents_and_dtype():
    vocab = Vocabulary(["cash", "win"])
    z = vocab.transform(["", "nothing here", "win"], dtype=torch.float32)
    assert z.dtype == torch.float32
    assert z.tolist() == [[0.0, 0.0], [0.0, 0.0], [0.0, 1.0]]
    assert vocab.transform([]).shape == (0, 2)
