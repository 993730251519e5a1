"""scikit-learn estimators over :class:`~torchglm.GeneralizedLinearModel` and the
library's solvers (no second implementation: ``fit`` builds the core model and calls
its ``fit``; predictions are the core model's).

The penalty. The library minimizes ``sum_i s_i nll_i / sum_i s_i + (l2 / 2) ||W||^2``
(the bias unpenalized). scikit-learn's classifiers minimize
``C sum_i s_i nll_i + (1/2) ||W||^2``: dividing by ``C sum_i s_i`` gives the same
minimizer with ``l2 = 1 / (C sum_i s_i)`` (``sum_i s_i = n`` without sample weights);
``C = inf`` is unpenalized. scikit-learn's GLM regressors (``PoissonRegressor``,
``GammaRegressor``, ``TweedieRegressor``) minimize
``(1 / (2 sum_i s_i)) sum_i s_i dev_i + (alpha / 2) ||W||^2``, and half the unit
deviance is the library's NLL up to a constant, so ``alpha`` *is* ``l2``.

L1 and the elastic net (:class:`~torchglm.penalty.ElasticNetPenalty`). scikit-learn's
``penalty="l1"`` / ``"elasticnet"`` minimize ``C sum_i s_i nll_i + l1_ratio ||W||_1 +
(1 - l1_ratio) ||W||^2 / 2``: ``l1 = l1_ratio / (C sum_i s_i)`` and
``l2 = (1 - l1_ratio) / (C sum_i s_i)``; the regressors' ``alpha`` and ``l1_ratio`` are
glum's (``l1 = alpha l1_ratio``, ``l2 = alpha (1 - l1_ratio)``). An L1 term is fitted by
the ``"proximal"`` solver (``solver="auto"`` picks it). ``class_weight`` multiplies the
sample weights by the weight of each sample's class (scikit-learn's
``compute_class_weight``; ``"balanced"``: ``n_samples / (n_classes * bincount(y))``,
weighted by the sample weights when given), so ``sum_i s_i`` above is the sum of the
products.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.metrics import get_scorer
from sklearn.model_selection import check_cv
from sklearn.utils import _safe_indexing
from sklearn.utils.class_weight import compute_class_weight

from .._validation import check_positive, fail
from ..families import get_family
from ..inference import GLMResults, glm_results
from ..models.glm import GeneralizedLinearModel, SoftmaxRegression
from ..models.glm import LogisticRegression as _Logistic
from ..penalty import ElasticNetPenalty
from ..threads import torch_threads
from ._base import LabelEncoding, LogProbaOutputs, TorchEstimator, check_target_values, to_numpy

__all__ = ["GLMClassifier", "GLMRegressor", "LogisticRegression", "LogisticRegressionCV", "ProbitRegression"]


#: scikit-learn's ``penalty`` values of the classifiers.
PENALTIES = ("l2", "l1", "elasticnet", None)


def elastic_net_from_C(penalty, C: float, l1_ratio, total_weight: float) -> ElasticNetPenalty:
    """The library's ``l1`` and ``l2`` for scikit-learn's ``penalty``, ``C`` and
    ``l1_ratio`` (module docstring): ``l1_ratio`` is 0 for ``"l2"``, 1 for ``"l1"``, the
    given one for ``"elasticnet"`` (ignored otherwise, as scikit-learn does); ``None``
    is unpenalized whatever ``C``."""
    if penalty not in PENALTIES:
        raise fail("penalty", f"one of {list(PENALTIES)}", repr(penalty))
    check_positive("C", C)
    if penalty is None:
        return ElasticNetPenalty(0.0, 0.0)
    ratio = {"l2": 0.0, "l1": 1.0}.get(penalty)
    if penalty == "elasticnet":
        ratio = _check_l1_ratio(l1_ratio, "with penalty='elasticnet'")
    return ElasticNetPenalty.from_C(C, ratio, total_weight)


def _check_l1_ratio(l1_ratio, where: str = "") -> float:
    if isinstance(l1_ratio, bool) or not isinstance(l1_ratio, numbers.Real) or not 0 <= l1_ratio <= 1:
        raise fail("l1_ratio", f"a number in [0, 1] {where}".strip(), repr(l1_ratio))
    return float(l1_ratio)


class _GLMEstimator(TorchEstimator):
    """Shared by the GLM classifiers and the regressor: the solver call, fitted
    attributes and the statsmodels-style results.

    ``warm_start``: start from the previous fit's coefficients (same features and
    classes), as scikit-learn's; ``random_state``: accepted for compatibility, unused
    (the solvers are deterministic full-batch methods: nothing is drawn at random);
    ``n_jobs``: torch's intra-op threads during the fit (:func:`torchglm.threads.torch_threads`;
    ``None``: torch's setting capped at the CPUs the rest of the machine leaves idle)."""

    _accept_sparse = True

    def _solver_options(self) -> dict:
        options = {}
        if self.max_iter is not None:
            options["max_iter"] = self.max_iter
        if self.tol is not None:
            options["tol"] = self.tol
        return options

    def _fit_core(self, model: GeneralizedLinearModel, X, y, weight, l1: float = 0.0) -> None:
        model = model.to(self._torch_device())
        options = self._solver_options()
        if l1 > 0:
            if self.solver not in ("auto", "proximal"):
                raise fail(
                    "solver",
                    "'auto' or 'proximal' with an L1 penalty (the solver that handles the L1 term)",
                    repr(self.solver),
                )
            options["l1"] = l1
        previous = getattr(self, "model_", None)
        if (
            getattr(self, "warm_start", False)
            and previous is not None
            and type(previous) is type(model)
            and previous.coef.shape == model.coef.shape
            and previous.has_intercept == model.has_intercept
        ):
            model.set_flat_parameters(previous.flat_parameters())
        result = model.fit(
            X, y, weight=weight, solver=self.solver, n_jobs=getattr(self, "n_jobs", None), **options
        )
        self.model_ = model
        self.fit_result_ = result
        self.n_iter_ = np.array([result.n_iter])
        self.converged_ = bool(result.converged)
        w = to_numpy(model.coef)
        b = to_numpy(model.intercept) if model.has_intercept else np.zeros(w.shape[0], w.dtype)
        self.coef_, self.intercept_ = self._shape_coef(w, b)

    def _shape_coef(self, w, b):
        return w, b

    def _targets_for_results(self, y):
        return y

    @torch.no_grad()
    def _eta(self, X) -> torch.Tensor:
        """``eta`` for ``X`` through the one prediction gate (:meth:`_predict_input`),
        then the core model's unchecked ``forward``."""
        x = self._predict_input(X)  # before model_ is read: the fitted check first
        return self.model_(x)

    def glm_results(self, X, y, sample_weight=None, **kwargs) -> GLMResults:
        """statsmodels-style inference (:func:`torchglm.glm_results`) for the fitted
        model on its training data ``X, y``: standard errors, z tests, intervals,
        deviance, AIC/BIC. Coefficients are named after ``feature_names_in_`` (a
        DataFrame's columns) when present. With ``C < inf`` (``alpha > 0``) the
        covariance is the Laplace/MAP one (see :class:`~torchglm.GLMResults`).

        ``kwargs``: ``alpha`` (interval level), ``use_t``, ``information``.
        """
        X = self._fitted_input(X)
        y = self._targets_for_results(
            y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
        )
        weight = self._sample_weight(sample_weight, X)
        names = list(getattr(self, "feature_names_in_", [f"x{j}" for j in range(self.n_features_in_)]))
        return glm_results(
            self.model_, X, y, weight, fit_result=self.fit_result_, feature_names=names, **kwargs
        )

    def summary(self, X, y, sample_weight=None, **kwargs) -> str:
        """The coefficient table of :meth:`glm_results` (statsmodels' layout)."""
        return self.glm_results(X, y, sample_weight, **kwargs).summary()


class GLMClassifier(LabelEncoding, LogProbaOutputs, ClassifierMixin, _GLMEstimator):
    """Binary classification with a Bernoulli GLM and any of its links.

    ``p(y = classes_[1] | x) = g^{-1}(w^T x + b)`` with ``g`` the ``link``
    (``"logit"``, ``"probit"``, ``"cloglog"``), fitted by the library's solvers on
    ``C sum_i s_i nll_i + ||w||^2 / 2`` (see the module docstring for ``C`` versus
    the library's ``l2``).

    Args:
        link: the Bernoulli family's link.
        C: inverse penalty strength, ``> 0``; ``np.inf`` is unpenalized
            (scikit-learn's ``penalty=None``). Library: ``l2 = 1 / (C sum_i s_i)``.
        penalty: ``"l2"`` (default), ``"l1"``, ``"elasticnet"`` or ``None`` (unpenalized);
            the L1 part is fitted by the ``"proximal"`` solver (module docstring).
        l1_ratio: the elastic net's mix in ``[0, 1]`` with ``penalty="elasticnet"``
            (ignored otherwise, as in scikit-learn).
        fit_intercept: fit the (unpenalized) bias.
        solver: a name in :data:`torchglm.solvers.SOLVERS` or ``"auto"``.
        max_iter, tol: passed to the solver (``None``: the solver's defaults).
        class_weight: ``None``, ``"balanced"`` or a dict ``{label: weight}``: each
            sample's weight is multiplied by its class's (module docstring).
        warm_start: start from the previous fit's coefficients.
        random_state: accepted for scikit-learn compatibility; unused (the solvers draw
            nothing at random).
        n_jobs: torch's intra-op threads during the fit; ``None``: torch's setting
            capped at the CPUs other processes leave idle (:mod:`torchglm.threads`),
            so a fit beside a busy process does not oversubscribe the cores.
        device: torch device of the model and the fit (``"cpu"``, ``"cuda"``).
        dtype: ``"float64"`` (default) or ``"float32"``: the model's parameters.

    Attributes:
        classes_, coef_ (1, d), intercept_ (1,), n_iter_ (1,), converged_,
        n_features_in_, feature_names_in_ (DataFrame input), model_ (the fitted
        torch module), fit_result_ (the solver's :class:`FitResult`).

    Example:
        >>> from sklearn.datasets import make_classification
        >>> X, y = make_classification(200, n_features=4, random_state=0)
        >>> clf = GLMClassifier(link="cloglog", C=10.0).fit(X, y)
        >>> clf.predict_proba(X[:2]).shape
        (2, 2)
    """

    _binary_only = True

    def __init__(
        self,
        link="logit",
        C=1.0,
        penalty="l2",
        l1_ratio=None,
        fit_intercept=True,
        solver="auto",
        max_iter=None,
        tol=None,
        class_weight=None,
        warm_start=False,
        random_state=None,
        n_jobs=None,
        device="cpu",
        dtype="float64",
    ):
        self.link = link
        self.C = C
        self.penalty = penalty
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.class_weight = class_weight
        self.warm_start = warm_start
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.device = device
        self.dtype = dtype

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = not self._binary_only
        return tags

    def _link_name(self) -> str:
        return self.link

    def _core_model(self, n_features: int, n_classes: int, l2: float) -> GeneralizedLinearModel:
        return GeneralizedLinearModel(
            n_features,
            "bernoulli",
            self._link_name(),
            2,
            l2=l2,
            fit_intercept=self.fit_intercept,
            dtype=self._torch_dtype(),
        )

    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n, d: array, DataFrame, scipy.sparse or tensor) and labels ``y``."""
        X, y = self._validate_Xy(X, y)
        encoded = self._encode(y)
        weight = self._class_weighted(self._sample_weight(sample_weight, X), y, encoded)
        total = X.shape[0] if weight is None else weight.sum()
        pen = elastic_net_from_C(self.penalty, self.C, self.l1_ratio, total)
        model = self._core_model(X.shape[1], len(self.classes_), pen.l2)
        self._fit_core(model, X, encoded, weight, l1=pen.l1)
        return self

    def _class_weighted(self, weight, y, encoded):
        """The sample weights times each sample's class weight (scikit-learn's
        ``compute_class_weight``, as its ``LogisticRegression`` calls it)."""
        if self.class_weight is None:
            return weight
        try:
            per_class = compute_class_weight(
                self.class_weight, classes=self.classes_, y=y, sample_weight=weight
            )
        except (ValueError, TypeError) as err:
            raise fail(
                "class_weight", "None, 'balanced' or a dict {label: weight} over the classes", f"{err}"
            ) from None
        per_sample = np.asarray(per_class, dtype=np.float64)[encoded]
        if weight is None:
            return per_sample
        # A class whose samples all weigh 0 gets an infinite "balanced" weight: its
        # samples stay at 0 (the data gate then names the single class left).
        with np.errstate(invalid="ignore"):
            return np.where(weight > 0, weight * per_sample, 0.0)

    def _targets_for_results(self, y):
        index = np.searchsorted(self.classes_, y)
        index = np.clip(index, 0, len(self.classes_) - 1)
        if not np.array_equal(self.classes_[index], y):
            raise fail("y", f"labels among classes_ {self.classes_.tolist()}", "an unseen label")
        return index

    def _log_proba(self, X) -> torch.Tensor:
        """``log p(C_k | x)``, (n, K), on the eta scale (no log of a rounded probability)."""
        eta = self._eta(X)
        if self.model_.family.multi_output:
            return torch.log_softmax(eta, dim=1)
        link = self.model_.family.link
        return torch.stack([link.log1m_inverse(eta), link.log_inverse(eta)], dim=1)

    def decision_function(self, X) -> np.ndarray:
        """Binary: the log-odds ``log p1 / p0`` (``eta`` itself for the logit link), > 0
        for ``classes_[1]``; multinomial: ``eta`` (n, K)."""
        if self._link_name() == "logit":  # binary logit, and multinomial (always logit)
            return to_numpy(self._eta(X))
        lp = self._log_proba(X)
        return to_numpy(lp[:, 1] - lp[:, 0])

    def predict(self, X) -> np.ndarray:
        eta = self._eta(X)  # first: its fitted check comes before model_ is read
        return self._decode(self.model_.family.predict(eta))


class LogisticRegression(GLMClassifier):
    """Logistic regression: binary (``sigma(w^T x + b)``, the core
    :class:`~torchglm.LogisticRegression`) or multinomial for three or more classes
    (``softmax(W x + b)``, the core :class:`~torchglm.SoftmaxRegression`), as
    scikit-learn's ``LogisticRegression`` with its default multinomial loss.

    Args: as :class:`GLMClassifier` without ``link``. ``C`` means what it means in
    scikit-learn (``l2 = 1 / (C sum_i s_i)`` in the library's terms), so the same
    ``C`` gives the same coefficients.

    Attributes: ``coef_`` is (1, d) for two classes and (K, d) for K > 2 (one row per
    class, as scikit-learn's multinomial fit).

    Example:
        >>> from sklearn.datasets import load_iris
        >>> X, y = load_iris(return_X_y=True)
        >>> LogisticRegression(C=1.0).fit(X, y).score(X, y) > 0.9
        True
    """

    _binary_only = False

    def __init__(
        self,
        C=1.0,
        penalty="l2",
        l1_ratio=None,
        fit_intercept=True,
        solver="auto",
        max_iter=None,
        tol=None,
        class_weight=None,
        warm_start=False,
        random_state=None,
        n_jobs=None,
        device="cpu",
        dtype="float64",
    ):
        self.C = C
        self.penalty = penalty
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.class_weight = class_weight
        self.warm_start = warm_start
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.device = device
        self.dtype = dtype

    def _link_name(self) -> str:
        return "logit"

    def _core_model(self, n_features, n_classes, l2):
        if n_classes == 2:
            return _Logistic(n_features, l2=l2, fit_intercept=self.fit_intercept, dtype=self._torch_dtype())
        return SoftmaxRegression(
            n_features, n_classes, l2=l2, fit_intercept=self.fit_intercept, dtype=self._torch_dtype()
        )


class ProbitRegression(GLMClassifier):
    """Binary probit regression, ``p(y = classes_[1] | x) = Phi(w^T x + b)`` (the core
    :class:`~torchglm.ProbitRegression`); arguments as :class:`GLMClassifier`
    without ``link``. ``decision_function`` is the log-odds ``log Phi(eta) / Phi(-eta)``."""

    def __init__(
        self,
        C=1.0,
        penalty="l2",
        l1_ratio=None,
        fit_intercept=True,
        solver="auto",
        max_iter=None,
        tol=None,
        class_weight=None,
        warm_start=False,
        random_state=None,
        n_jobs=None,
        device="cpu",
        dtype="float64",
    ):
        self.C = C
        self.penalty = penalty
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.class_weight = class_weight
        self.warm_start = warm_start
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.device = device
        self.dtype = dtype

    def _link_name(self) -> str:
        return "probit"


class GLMRegressor(RegressorMixin, _GLMEstimator):
    """A GLM regressor: ``E[y | x] = g^{-1}(w^T x + b)`` for a family and link of the
    library (``"gaussian"``, ``"poisson"``, ``"gamma"``, ``"exponential"``,
    ``"binomial"`` with proportions as ``y`` and trials as ``sample_weight``).

    Args:
        family: a name in :data:`torchglm.FAMILIES` (not the classifiers'
            ``"bernoulli"``/``"categorical"``: use :class:`GLMClassifier`).
        link: a link the family allows; ``None`` is its canonical link.
        alpha: penalty strength on the weights, ``>= 0``: scikit-learn's ``alpha`` of
            ``PoissonRegressor``/``GammaRegressor``/``TweedieRegressor``, and exactly
            the library's ``l2`` for ``l1_ratio = 0`` (see the module docstring). Default 0
            (unpenalized, as statsmodels; scikit-learn's default is 1).
        l1_ratio: glum's (and scikit-learn's ``ElasticNet``'s) mix in ``[0, 1]``:
            ``l1 = alpha l1_ratio``, ``l2 = alpha (1 - l1_ratio)``. Default 0 (ridge).
        fit_intercept, solver, max_iter, tol, warm_start, n_jobs, device, dtype: as
            :class:`GLMClassifier`.

    Attributes:
        coef_ (d,), intercept_ (float), n_iter_ (1,), converged_, n_features_in_,
        feature_names_in_, model_, fit_result_.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(200, 2)); counts = rng.poisson(np.exp(0.5 * X[:, 0] - 0.3 * X[:, 1]))
        >>> reg = GLMRegressor(family="poisson").fit(X, counts)
        >>> print(reg.summary(X, counts))
                               Generalized linear model results
        ==============================================================================
        Family:                        poisson  No. observations:                  200
        Link:                              log  Df residuals:                      197
        ...
        x0 ...
        x1 ...
        intercept ...
        ==============================================================================
    """

    def __init__(
        self,
        family="gaussian",
        link=None,
        alpha=0.0,
        l1_ratio=0.0,
        fit_intercept=True,
        solver="auto",
        max_iter=None,
        tol=None,
        warm_start=False,
        n_jobs=None,
        device="cpu",
        dtype="float64",
    ):
        self.family = family
        self.link = link
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.warm_start = warm_start
        self.n_jobs = n_jobs
        self.device = device
        self.dtype = dtype

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        if self.family in ("poisson", "gamma", "exponential"):
            tags.target_tags.positive_only = True
        return tags

    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n, d) and real targets ``y`` (n,) in the family's support."""
        X, y = self._validate_Xy(X, y, y_numeric=True)
        family = get_family(self.family, self.link)
        if family.is_classifier:
            raise fail(
                "family", "a regression family (use GLMClassifier for classification)", repr(self.family)
            )
        check_positive("alpha", self.alpha, allow_zero=True)
        pen = ElasticNetPenalty.from_alpha(float(self.alpha), _check_l1_ratio(self.l1_ratio))
        model = GeneralizedLinearModel(
            X.shape[1],
            family,
            l2=pen.l2,
            fit_intercept=self.fit_intercept,
            dtype=self._torch_dtype(),
        )
        y = y.astype(np.float64 if self._torch_dtype() == torch.float64 else np.float32, copy=False)
        self._fit_core(model, X, y, self._sample_weight(sample_weight, X), l1=pen.l1)
        return self

    def _shape_coef(self, w, b):
        return w[0], float(b[0])

    def score(self, X, y, sample_weight=None) -> float:
        """``D^2 = 1 - D(y, mu) / D(y, ybar)``, the fraction of deviance explained (the
        score of scikit-learn's GLM regressors; ``R^2`` for the Gaussian family), with
        ``D = sum_i s_i d(y_i, mu_i)`` the family's deviance and ``ybar`` the weighted mean."""
        X = self._fitted_input(X)
        check_target_values(y)
        if isinstance(y, torch.Tensor):
            y = y.detach()
        # the targets through the gate model.fit applies (check_data: the family's
        # support, finiteness, one message), not scored into a NaN
        x, y, s, _ = self.model_.as_data(X, y, self._sample_weight(sample_weight, X))
        x, y = self.model_.check_data(x, y, s, fitting=False)
        with torch.no_grad():
            mu = self.model_.family.mean(self.model_(x.to(self.model_.param_dtype)))
        y = y.to(mu)
        s = torch.ones_like(y) if s is None else s.to(mu)
        family = self.model_.family
        ybar = (s * y).sum() / s.sum()
        dev = (s * family.unit_deviance(y, mu)).sum()
        null = (s * family.unit_deviance(y, ybar.expand_as(y))).sum()
        return float(1.0 - dev / null)

    def predict(self, X) -> np.ndarray:
        """The predicted mean ``E[y | x]``, shape (n,)."""
        eta = self._eta(X)  # first: its fitted check comes before model_ is read
        return to_numpy(self.model_.family.mean(eta))


class LogisticRegressionCV(LogisticRegression):
    """:class:`LogisticRegression` with ``C`` (and the elastic net's ``l1_ratio``) chosen
    by cross-validation, as scikit-learn's ``LogisticRegressionCV``.

    For every fold (``cv``: scikit-learn's ``check_cv``, stratified 5-fold by default)
    and ``l1_ratio``, the path over ``Cs_`` (ascending: strongest penalty first) is
    fitted with each fit warm-started from the previous ``C``'s coefficients; each fit
    is scored on the held-out fold (``scoring``: a scikit-learn scorer name or callable;
    ``None``, accuracy). The best ``(C, l1_ratio)`` maximizes the score summed over the
    folds (the first on ties). ``refit=True`` then fits it on all the data;
    ``refit=False`` keeps the mean of the folds' best coefficients, and ``C_`` the mean
    of their best ``C``. ``class_weight="balanced"`` is computed once on the whole data
    and passed to every fold, as scikit-learn does.

    Args:
        Cs: an int (that many ``C`` on ``np.logspace(-4, 4, Cs)``) or a sequence of ``C``.
        l1_ratios: the ``l1_ratio`` grid for ``penalty="elasticnet"`` (required there).
        cv: folds: an int, a splitter or an iterable of (train, test) index pairs.
        penalty, fit_intercept, solver, max_iter, tol, class_weight, random_state,
            n_jobs, device, dtype: as :class:`LogisticRegression`.
        scoring: the cross-validation score (``None``: accuracy).
        refit: refit the best parameters on all the data.

    Attributes:
        Cs_ (n_Cs,), l1_ratios_ (n_l1_ratios,), C_ (float), l1_ratio_ (float or ``None``),
        scores_ (n_folds, n_l1_ratios, n_Cs), coefs_paths_ (n_folds, n_l1_ratios, n_Cs,
        rows, n_features + fit_intercept), and :class:`LogisticRegression`'s.

    Example:
        >>> from sklearn.datasets import load_breast_cancer
        >>> from sklearn.pipeline import make_pipeline
        >>> from sklearn.preprocessing import StandardScaler
        >>> X, y = load_breast_cancer(return_X_y=True)
        >>> cv = make_pipeline(StandardScaler(), LogisticRegressionCV(Cs=[0.01, 0.1, 1.0], penalty="l1")).fit(X, y)
        >>> cv[-1].C_ in cv[-1].Cs_, cv[-1].score(StandardScaler().fit_transform(X), y) > 0.95
        (True, True)
    """

    def __init__(
        self,
        Cs=10,
        l1_ratios=None,
        cv=None,
        penalty="l2",
        scoring=None,
        refit=True,
        fit_intercept=True,
        solver="auto",
        max_iter=None,
        tol=None,
        class_weight=None,
        random_state=None,
        n_jobs=None,
        device="cpu",
        dtype="float64",
    ):
        self.Cs = Cs
        self.l1_ratios = l1_ratios
        self.cv = cv
        self.penalty = penalty
        self.scoring = scoring
        self.refit = refit
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.class_weight = class_weight
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.device = device
        self.dtype = dtype

    def _grid(self):
        if isinstance(self.Cs, numbers.Integral) and not isinstance(self.Cs, bool):
            if self.Cs < 1:
                raise fail("Cs", "a positive int or a sequence of C > 0", repr(self.Cs))
            Cs = np.logspace(-4, 4, int(self.Cs))
        else:
            Cs = np.asarray(self.Cs, dtype=np.float64).reshape(-1)
            if Cs.size == 0 or not bool(np.all(Cs > 0)):
                raise fail("Cs", "a positive int or a sequence of C > 0", repr(self.Cs))
        if self.penalty != "elasticnet":
            return Cs, [None]
        if self.l1_ratios is None or np.ndim(self.l1_ratios) != 1 or len(self.l1_ratios) == 0:
            raise fail(
                "l1_ratios", "a sequence of numbers in [0, 1] with penalty='elasticnet'", repr(self.l1_ratios)
            )
        return Cs, [_check_l1_ratio(r, "with penalty='elasticnet'") for r in self.l1_ratios]

    def _member(self, C, l1_ratio, class_weight, warm_start) -> LogisticRegression:
        return LogisticRegression(
            C=C,
            penalty=self.penalty,
            l1_ratio=l1_ratio,
            fit_intercept=self.fit_intercept,
            solver=self.solver,
            max_iter=self.max_iter,
            tol=self.tol,
            class_weight=class_weight,
            warm_start=warm_start,
            n_jobs=self.n_jobs,  # a count given is kept inside each fold's fit
            device=self.device,
            dtype=self.dtype,
        )

    def fit(self, X, y, sample_weight=None):
        """Cross-validate ``C`` (and ``l1_ratio``) on ``X, y``, then fit (``refit``)."""
        X, y = self._validate_Xy(X, y)
        encoded = self._encode(y)
        if self.penalty not in PENALTIES:
            raise fail("penalty", f"one of {list(PENALTIES)}", repr(self.penalty))
        weight = self._sample_weight(sample_weight, X)
        Cs, ratios = self._grid()
        class_weight = self.class_weight
        if class_weight == "balanced":
            self._class_weighted(weight, y, encoded)  # the one message for bad inputs
            per_class = compute_class_weight("balanced", classes=self.classes_, y=y, sample_weight=weight)
            class_weight = dict(zip(self.classes_.tolist(), per_class))
        folds = list(check_cv(self.cv, y, classifier=True).split(np.zeros((len(y), 1)), y))
        scorer = None if self.scoring is None else get_scorer(self.scoring)
        rows = 1 if len(self.classes_) == 2 else len(self.classes_)
        width = self.n_features_in_ + bool(self.fit_intercept)
        scores = np.empty((len(folds), len(ratios), len(Cs)))
        paths = np.zeros((len(folds), len(ratios), len(Cs), rows, width))
        with torch_threads(self.n_jobs):
            for f, (train, test) in enumerate(folds):
                X_train, X_test = _rows(X, train), _rows(X, test)
                w_train = None if weight is None else weight[train]
                w_test = None if weight is None else weight[test]
                for r, ratio in enumerate(ratios):
                    member = self._member(Cs[0], ratio, class_weight, warm_start=True)
                    for c, C in enumerate(Cs):
                        member.set_params(C=C).fit(X_train, y[train], sample_weight=w_train)
                        extra = {} if w_test is None else {"sample_weight": w_test}
                        if scorer is None:
                            scores[f, r, c] = member.score(X_test, y[test], **extra)
                        else:
                            scores[f, r, c] = scorer(member, X_test, y[test], **extra)
                        paths[f, r, c, :, : self.n_features_in_] = member.coef_
                        if self.fit_intercept:
                            paths[f, r, c, :, -1] = member.intercept_
        self.Cs_, self.l1_ratios_ = Cs, np.asarray([np.nan if r is None else r for r in ratios])
        self.scores_, self.coefs_paths_ = scores, paths
        # C-major like scikit-learn's (n_Cs, n_l1_ratios) sum, so ties break the same way
        grid = (len(Cs), len(ratios))
        best_c, best_r = np.unravel_index(np.argmax(scores.sum(0).T), grid)
        if self.refit:
            self.C_, self.l1_ratio_ = float(Cs[best_c]), ratios[best_r]
            final = self._member(self.C_, self.l1_ratio_, class_weight, warm_start=False)
            with torch_threads(self.n_jobs):
                final.fit(X, y, sample_weight=sample_weight)
            for name in ("model_", "fit_result_", "n_iter_", "converged_", "coef_", "intercept_"):
                setattr(self, name, getattr(final, name))
            return self
        best = [np.unravel_index(np.argmax(scores[f].T), grid) for f in range(len(folds))]
        self.C_ = float(np.mean([Cs[c] for c, _ in best]))
        self.l1_ratio_ = None if ratios[0] is None else float(np.mean([ratios[r] for _, r in best]))
        mean = np.mean([paths[f, r, c] for f, (c, r) in enumerate(best)], axis=0)
        total = X.shape[0] if weight is None else weight.sum()
        model = self._core_model(
            self.n_features_in_,
            len(self.classes_),
            elastic_net_from_C(
                self.penalty, self.C_, self.l1_ratio_ if self.l1_ratio_ is not None else 0.0, total
            ).l2,
        )
        model = model.to(self._torch_device())
        theta = mean[:, : self.n_features_in_].reshape(-1)
        if self.fit_intercept:
            theta = np.concatenate([theta, mean[:, -1]])
        model.set_flat_parameters(torch.as_tensor(theta))
        model.mark_fitted()
        self.model_, self.fit_result_ = model, None
        self.n_iter_ = np.array([0])
        self.converged_ = False  # a mean of fold optima is no optimum of any objective
        self.coef_, self.intercept_ = (
            mean[:, : self.n_features_in_],
            (mean[:, -1] if self.fit_intercept else np.zeros(rows)),
        )
        return self


def _rows(X, index):
    """Rows ``index`` of a NumPy array, scipy.sparse matrix or torch tensor."""
    if isinstance(X, torch.Tensor):
        return X[torch.as_tensor(index, device=X.device)]
    return _safe_indexing(X, index)
