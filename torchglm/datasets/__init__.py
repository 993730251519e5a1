"""The shipped Rotten Tomatoes corpus, under its historical public name.

The loaders and the data file live in :mod:`torchglm.data.movie_reviews` (next to
the other built-in datasets of :mod:`torchglm.data.datasets`); this package only
re-exports them, so ``from torchglm.datasets import load_movie_reviews`` keeps working.
"""

from ..data.movie_reviews import MOVIE_REVIEW_CLASSES, load_movie_reviews, movie_review_counts

__all__ = ["MOVIE_REVIEW_CLASSES", "load_movie_reviews", "movie_review_counts"]
