"""The NIST StRD linear least squares datasets, with their certified values.

The Statistical Reference Datasets of the U.S. National Institute of Standards and
Technology (https://www.itl.nist.gov/div898/strd/lls/lls.shtml; public domain) are
eleven regression problems whose coefficients and standard deviations NIST certified
in 500-digit arithmetic, from easy (Norris) to unsolvable without care in float64
(Filip: a degree-10 polynomial whose design has condition number about 1e15, and
the badly scaled, nearly collinear Longley). They test a least-squares solver to its
last digits: the log relative error (LRE, ``-log10 |b - b_cert| / |b_cert|``) of each
coefficient is the number of correct digits.

Each problem is a :class:`CertifiedRegression`; :data:`NIST_LLS` holds them by name
and :data:`~torchglm.data.DATASETS` serves them as built-in regression datasets
``nist_<name>`` (the design's columns, with the powers of ``x`` for the polynomial
models; ``NoInt1``/``NoInt2`` are fitted without an intercept). ``NoInt2``'s certified
values are the exact ones of its closed form, ``b = sum(x y) / sum(x^2)``, which NIST's
agree with to all its digits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dataset import Dataset

__all__ = ["CertifiedRegression", "NIST_LLS", "nist_dataset"]


@dataclass(frozen=True)
class CertifiedRegression:
    """One NIST StRD linear least squares problem.

    Attributes:
        name: NIST's name (``"Filip"``, ...).
        difficulty: NIST's level: ``"lower"``, ``"average"`` or ``"higher"``.
        x: the predictors as published, (n, k).
        y: the response, (n,).
        degree: for a polynomial model in one predictor, its degree (the design
            holds ``x, x^2, ..., x^degree``); ``None``: the predictors as they are.
        intercept: whether the model has an intercept.
        coef: the certified coefficients, intercept first (where there is one).
        sd: their certified standard deviations, in the same order.
        residual_sd: the certified residual standard deviation, where given here.
    """

    name: str
    difficulty: str
    x: np.ndarray
    y: np.ndarray
    degree: int | None
    intercept: bool
    coef: tuple[float, ...]
    sd: tuple[float, ...]
    residual_sd: float | None = None

    def design(self) -> np.ndarray:
        """The model's columns without the intercept: ``x, x^2, ..., x^degree`` for a
        polynomial model (powers of the published values, in float64), else ``x``."""
        if self.degree is None:
            return self.x.copy()
        return np.column_stack([self.x[:, 0] ** k for k in range(1, self.degree + 1)])

    def feature_names(self) -> list[str]:
        if self.degree is None:
            return list(_NAMES.get(self.name, [f"x{j + 1}" for j in range(self.x.shape[1])]))
        return ["x"] + [f"x^{k}" for k in range(2, self.degree + 1)]

    def dataset(self) -> Dataset:
        """The problem as a built-in regression :class:`~torchglm.data.Dataset`."""
        return Dataset(
            self.design(),
            self.y.copy(),
            "regression",
            None,
            self.feature_names(),
            f"NIST StRD {self.name} ({'with' if self.intercept else 'no'} intercept)",
        )


def _columns(text: str) -> np.ndarray:
    return np.array([[float(v) for v in line.split()] for line in text.strip().splitlines()])


_NAMES = {"Longley": ["GNPDEFL", "GNP", "UNEMP", "ARMED", "POP", "YEAR"]}

# -- the data: "y x" rows (Longley: "y x1 ... x6"), as NIST publishes them -----------
_NORRIS = """
0.1 0.2
338.8 337.4
118.1 118.2
888.0 884.6
9.2 10.1
228.1 226.5
668.5 666.3
998.5 996.3
449.1 448.6
778.9 777.0
559.2 558.2
0.3 0.4
0.1 0.6
778.1 775.5
668.8 666.9
339.3 338.0
448.9 447.5
10.8 11.6
557.7 556.0
228.3 228.1
998.0 995.8
888.8 887.6
119.6 120.2
0.3 0.3
0.6 0.3
557.6 556.8
339.3 339.1
888.0 887.2
998.5 999.0
778.9 779.0
10.2 11.1
117.6 118.3
228.9 229.2
668.4 669.1
449.2 448.9
0.2 0.5
"""

_PONTIUS = """
.11019 150000
.21956 300000
.32949 450000
.43899 600000
.54803 750000
.65694 900000
.76562 1050000
.87487 1200000
.98292 1350000
1.09146 1500000
1.20001 1650000
1.30822 1800000
1.41599 1950000
1.52399 2100000
1.63194 2250000
1.73947 2400000
1.84646 2550000
1.95392 2700000
2.06128 2850000
2.16844 3000000
.11052 150000
.22018 300000
.32939 450000
.43886 600000
.54798 750000
.65739 900000
.76596 1050000
.87474 1200000
.98300 1350000
1.09150 1500000
1.20004 1650000
1.30818 1800000
1.41613 1950000
1.52408 2100000
1.63159 2250000
1.73965 2400000
1.84696 2550000
1.95445 2700000
2.06177 2850000
2.16829 3000000
"""

_NOINT1 = "\n".join(f"{130 + i} {60 + i}" for i in range(11))
_NOINT2 = """
3 4
4 5
4 6
"""

_FILIP = """
0.8116 -6.860120914
0.9072 -4.324130045
0.9052 -4.358625055
0.9039 -4.358426747
0.8053 -6.955852379
0.8377 -6.661145254
0.8667 -6.355462942
0.8809 -6.118102026
0.7975 -7.115148017
0.8162 -6.815308569
0.8515 -6.519993057
0.8766 -6.204119983
0.8885 -5.853871964
0.8859 -6.109523091
0.8959 -5.79832982
0.8913 -5.482672118
0.8959 -5.171791386
0.8971 -4.851705903
0.9021 -4.517126416
0.909 -4.143573228
0.9139 -3.709075441
0.9199 -3.499489089
0.8692 -6.300769497
0.8872 -5.953504836
0.89 -5.642065153
0.891 -5.031376979
0.8977 -4.680685696
0.9035 -4.329846955
0.9078 -3.928486195
0.7675 -8.56735134
0.7705 -8.363211311
0.7713 -8.107682739
0.7736 -7.823908741
0.7775 -7.522878745
0.7841 -7.218819279
0.7971 -6.920818754
0.8329 -6.628932138
0.8641 -6.323946875
0.8804 -5.991399828
0.7668 -8.781464495
0.7633 -8.663140179
0.7678 -8.473531488
0.7697 -8.247337057
0.77 -7.971428747
0.7749 -7.676129393
0.7796 -7.352812702
0.7897 -7.072065318
0.8131 -6.774174009
0.8498 -6.478861916
0.8741 -6.159517513
0.8061 -6.835647144
0.846 -6.53165267
0.8751 -6.224098421
0.8856 -5.910094889
0.8919 -5.598599459
0.8934 -5.290645224
0.894 -4.974284616
0.8957 -4.64454848
0.9047 -4.290560426
0.9129 -3.885055584
0.9209 -3.408378962
0.9219 -3.13200249
0.7739 -8.726767166
0.7681 -8.66695597
0.7665 -8.511026475
0.7703 -8.165388579
0.7702 -7.886056648
0.7761 -7.588043762
0.7809 -7.283412422
0.7961 -6.995678626
0.8253 -6.691862621
0.8602 -6.392544977
0.8809 -6.067374056
0.8301 -6.684029655
0.8664 -6.378719832
0.8834 -6.065855188
0.8898 -5.752272167
0.8964 -5.132414673
0.8963 -4.811352704
0.9074 -4.098269308
0.9119 -3.66174277
0.9228 -3.2644011
"""

_LONGLEY = """
60323 83.0 234289 2356 1590 107608 1947
61122 88.5 259426 2325 1456 108632 1948
60171 88.2 258054 3682 1616 109773 1949
61187 89.5 284599 3351 1650 110929 1950
63221 96.2 328975 2099 3099 112075 1951
63639 98.1 346999 1932 3594 113270 1952
64989 99.0 365385 1870 3547 115094 1953
63761 100.0 363112 3578 3350 116219 1954
66019 101.2 397469 2904 3048 117388 1955
67857 104.6 419180 2822 2857 118734 1956
68169 108.4 442769 2936 2798 120445 1957
66513 110.8 444546 4681 2637 121950 1958
68655 112.6 482704 3813 2552 123366 1959
69564 114.2 502601 3931 2514 125368 1960
69331 115.7 518173 4806 2572 127852 1961
70551 116.9 554894 4007 2827 130081 1962
"""

# Wampler1..5: x = 0..20, the responses only.
_WAMPLER_Y = {
    "Wampler1": """1 6 63 364 1365 3906 9331 19608 37449 66430 111111 177156 271453 402234 579195
        813616 1118481 1508598 2000719 2613660 3368421""",
    "Wampler2": """1.00000 1.11111 1.24992 1.42753 1.65984 1.96875 2.38336 2.94117 3.68928 4.68559
        6.00000 7.71561 9.92992 12.75603 16.32384 20.78125 26.29536 33.05367 41.26528 51.16209
        63.00000""",
    "Wampler3": """760. -2042. 2111. -1684. 3888. 1858. 11379. 17560. 39287. 64382. 113159. 175108.
        273291. 400186. 581243. 811568. 1121004. 1506550. 2002767. 2611612. 3369180.""",
    "Wampler4": """75901 -204794 204863 -204436 253665 -200894 214131 -185192 221249 -138370 315911
        -27644 455253 197434 783995 608816 1370781 1303798 2205519 2408860 3444321""",
    "Wampler5": """7590001 -20479994 20480063 -20479636 25231365 -20476094 20489331 -20460392
        18417449 -20413570 20591111 -20302844 18651453 -20077766 21059195 -19666384 26348481
        -18971402 22480719 -17866340 10958421""",
}
_WAMPLER_SD = {
    "Wampler1": (0.0,) * 6,
    "Wampler2": (0.0,) * 6,
    "Wampler3": (
        2152.32624678170,
        2363.55173469681,
        779.343524331583,
        101.475507550350,
        5.64566512170752,
        0.112324854679312,
    ),
    "Wampler4": (
        215232.624678170,
        236355.173469681,
        77934.3524331583,
        10147.5507550350,
        564.566512170752,
        11.2324854679312,
    ),
    "Wampler5": (
        21523262.4678170,
        23635517.3469681,
        7793435.24331583,
        1014755.07550350,
        56456.6512170752,
        1123.24854679312,
    ),
}
_WAMPLER_COEF = {name: (1.0,) * 6 for name in _WAMPLER_Y} | {"Wampler2": (1.0, 0.1, 0.01, 0.001, 1e-4, 1e-5)}
#: NIST's levels of difficulty.
_WAMPLER_LEVEL = {
    "Wampler1": "lower",
    "Wampler2": "lower",
    "Wampler3": "lower",
    "Wampler4": "average",
    "Wampler5": "higher",
}


def _yx(text: str) -> tuple[np.ndarray, np.ndarray]:
    rows = _columns(text)
    return rows[:, 1:], rows[:, 0]


def _build() -> dict[str, CertifiedRegression]:
    out = {}

    def add(name, difficulty, text, degree, intercept, coef, sd, residual_sd=None):
        x, y = _yx(text)
        out[name] = CertifiedRegression(name, difficulty, x, y, degree, intercept, coef, sd, residual_sd)

    add(
        "Norris",
        "lower",
        _NORRIS,
        1,
        True,
        (-0.262323073774029, 1.00211681802045),
        (0.232818234301152, 0.429796848199937e-03),
        0.884796396144373,
    )
    add(
        "Pontius",
        "lower",
        _PONTIUS,
        2,
        True,
        (0.673565789473684e-03, 0.732059160401003e-06, -0.316081871345029e-14),
        (0.107938612033077e-03, 0.157817399981659e-09, 0.486652849992036e-16),
    )
    add("NoInt1", "average", _NOINT1, 1, False, (2.07438016528926,), (0.165289256198347e-01,))
    # NoInt2: b = sum(x y) / sum(x^2) = 56/77, RSS = 41 - 56^2/77 = 3/11 on 2 degrees of
    # freedom, sd(b) = sqrt(RSS / 2 / 77) = sqrt(3/1694) (NIST: 0.727272727272727 and
    # 0.420827318078432E-01).
    add("NoInt2", "average", _NOINT2, 1, False, (56 / 77,), (float(np.sqrt(3 / 1694)),))
    add(
        "Filip",
        "higher",
        _FILIP,
        10,
        True,
        (
            -1467.48961422980,
            -2772.17959193342,
            -2316.37108160893,
            -1127.97394098372,
            -354.478233703349,
            -75.1242017393757,
            -10.8753180355343,
            -1.06221498588947,
            -0.670191154593408e-01,
            -0.246781078275479e-02,
            -0.402962525080404e-04,
        ),
        (
            298.084530995537,
            559.779865474950,
            466.477572127796,
            227.204274477751,
            71.6478660875927,
            15.2897178747400,
            2.23691159816033,
            0.221624321934227,
            0.142363763154724e-01,
            0.535617408889821e-03,
            0.896632837373868e-05,
        ),
    )
    add(
        "Longley",
        "higher",
        _LONGLEY,
        None,
        True,
        (
            -3482258.63459582,
            15.0618722713733,
            -0.358191792925910e-01,
            -2.02022980381683,
            -1.03322686717359,
            -0.511041056535807e-01,
            1829.15146461355,
        ),
        (
            890420.383607373,
            84.9149257747669,
            0.334910077722432e-01,
            0.488399681651699,
            0.214274163161675,
            0.226073200069370,
            455.478499142212,
        ),
        float(np.sqrt(836424.055505915 / 9)),  # certified RSS on 16 - 7 degrees of freedom
    )
    for name, ys in _WAMPLER_Y.items():
        y = np.array([float(v) for v in ys.split()])
        text = "\n".join(f"{float(v)!r} {k}" for k, v in enumerate(y))
        add(name, _WAMPLER_LEVEL[name], text, 5, True, _WAMPLER_COEF[name], _WAMPLER_SD[name])
    return out


#: The eleven NIST StRD linear least squares problems, by NIST's name.
NIST_LLS: dict[str, CertifiedRegression] = _build()


def nist_dataset(name: str) -> Dataset:
    """``NIST_LLS[name].dataset()``: a built-in ``nist_<name>`` dataset."""
    return NIST_LLS[name].dataset()
