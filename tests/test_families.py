"""Statistical tests of the variational families: Gamma, LogNormal, Normal, Beta, Dirichlet.

Each family is checked against exact answers (scipy, closed forms) at several parameter
settings, including gamma shapes 0.01 and 0.1, where most of the mass of ``z`` lies below
float32's range, and 10 and 100 (paper, Section 3.1 and supplement B-D):

* the standardization and its inverse round-trip: ``T(T^{-1}(z)) = z`` and ``T^{-1}(T(eps)) = eps``;
* ``eps = T^{-1}(z)`` has mean 0 whatever ``v``; variance 1 (gamma, log-normal, normal,
  beta "logit", Dirichlet "diagonal"), identity covariance (Dirichlet "full", "gamma",
  "paper"), and ``psi_1(a) + psi_1(b)`` for beta "zero-correction";
* sample mean and variance against ``mean()`` and ``variance()``; Monte Carlo entropy against
  ``entropy()``; Kolmogorov-Smirnov against scipy;
* ``log_prob_standardized = log_prob(T(eps)) + log_abs_det_jacobian``, the Jacobian against
  autodiff, and ``q_eps`` integrating to 1 (1-D families);
* float32 draws at shapes 1e-3, 1e-2, 0.1 give finite ``eps`` and ``log z`` (the G-REP
  gradients there: ``tests/test_grep.py``);
* ``natural_params(init_params())`` returns the requested values.

Why a false failure is unlikely. Every draw comes from a fixed key (the case's index), so each
test is deterministic; the seeds were not chosen to pass. For a new seed, each moment check
(5 Monte Carlo standard errors, two-sided, ``NUM_DRAWS = 100,000``) fails a correct family with
probability ~6e-7 in the Gaussian limit; the most skewed statistic here (the sample variance
at gamma shape 0.01, skewness ~0.25) raises that to ~1e-4. Each KS check fails with
probability 1e-3 (p-value threshold); there are 44 of them (46 with the slow tier), so a
fresh set of seeds would see a spurious KS failure ~4% of the time. Tolerances on
deterministic identities are stated in units of float32's machine epsilon times the
magnitudes involved.

Float32. ``z = T(eps)`` is handed to models clamped to ``[1e-30, 1 - 1.6e-7]``
(``grepvi.numerics.safe_exp`` / ``safe_sigmoid``); at gamma shape 0.01 about half the draws are
below 1e-30. Tests therefore work with the exact log-space coordinate (``log z``, or
``logit z`` for the beta) where ``z`` itself would be clamped, and compare ``z`` only on
unclamped draws.
"""

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special, stats

from grepvi import numerics
from grepvi.families import Beta, Dirichlet, Gamma, LogNormal, Normal

NUM_DRAWS = 100_000  # the same sample shape everywhere: the sampler compiles once per latent shape
KS_NUM_DRAWS = 20_000  # scipy's beta CDF is slow; 20,000 draws detect a CDF error of ~0.014
MAX_STANDARD_ERRORS = 5.0
KS_MIN_P_VALUE = 1e-3
EPS32 = float(np.finfo(np.float32).eps)
LOG_LOWER = numerics.log_tiny(jnp.float32)  # log of the lower clamp of z (1e-30)
UPPER_Z = 1.0 - 4.0 * float(np.finfo(np.float32).epsneg)  # beta: z above this may be clamped


# --- cases ---------------------------------------------------------------------------------


class Case(NamedTuple):
    name: str
    family: object
    params: dict
    near_clamp: bool  # a non-negligible fraction (> 1e-4) of z = T(eps) meets the float32 clamp

    @property
    def natural(self):
        """The family's natural parameters, float64 numpy."""
        return {k: np.asarray(v, np.float64) for k, v in self.family.natural_params(self.params).items()}


def _gamma(a, mean):
    family = Gamma(init_concentration=a, init_mean=mean)
    return Case(f"gamma-a{a:g}-m{mean:g}", family, family.init_params(), a <= 0.1)


def _lognormal(loc, scale):
    family = LogNormal(init_loc=loc, init_scale=scale)
    return Case(f"lognormal-{loc:g}-{scale:g}", family, family.init_params(), False)


def _normal(loc, scale):
    family = Normal(init_loc=loc, init_scale=scale)
    return Case(f"normal-{loc:g}-{scale:g}", family, family.init_params(), False)


def _beta(a, b, standardization="logit"):
    family = Beta(init_concentration1=a, init_concentration0=b, standardization=standardization)
    return Case(f"beta-{standardization}-{a:g}-{b:g}", family, family.init_params(), min(a, b) <= 0.1)


def _dirichlet(alpha, standardization="full"):
    family = Dirichlet(shape=(len(alpha),), standardization=standardization)
    params = {"concentration": numerics.inverse_softplus(jnp.asarray(alpha, jnp.float32))}
    name = f"dirichlet-{standardization}-" + "-".join(f"{a:g}" for a in alpha)
    return Case(name, family, params, min(alpha) <= 0.1)


CASES = [
    _gamma(0.01, 1.0),
    _gamma(0.1, 2.0),
    _gamma(1.0, 0.5),
    _gamma(10.0, 3.0),
    _gamma(100.0, 0.2),
    _lognormal(0.5, 0.3),
    _lognormal(-1.0, 0.8),
    _lognormal(2.0, 0.05),
    _normal(-1.0, 2.0),
    _normal(0.3, 0.01),
    _beta(0.1, 0.1),
    _beta(0.5, 2.0),
    _beta(1.0, 1.0),
    _beta(30.0, 5.0),
    _beta(0.5, 2.0, "zero-correction"),
    _beta(3.0, 1.0, "zero-correction"),
    _dirichlet([0.5, 2.0, 1.0, 3.0]),
    _dirichlet([1.0, 1.0, 1.0, 1.0]),  # repeated eigenvalues of the log-ratio covariance
    _dirichlet([2.0, 0.7]),
    _dirichlet([0.1, 0.3, 0.2, 0.15]),
    _dirichlet([10.0, 50.0, 20.0, 100.0]),
    _dirichlet([0.5, 2.0, 1.0, 3.0], "diagonal"),
    _dirichlet([0.5, 2.0, 1.0, 3.0], "gamma"),
    _dirichlet([0.5, 2.0, 1.0, 3.0], "paper"),
]


def _is_slow(case):
    """The K = 2 Dirichlet (the only one whose ``eps`` is 1-D, for the integration test) needs
    its own compilations of the sampler and of every map: slow tier."""
    return isinstance(case.family, Dirichlet) and case.family.shape[-1] == 2


def _select(predicate=lambda case: True):
    return [
        pytest.param(index, id=case.name, marks=[pytest.mark.slow] if _is_slow(case) else [])
        for index, case in enumerate(CASES)
        if predicate(case)
    ]


def _has_inverse(case):
    """``standardize`` and ``log_abs_det_jacobian`` exist (not for the Dirichlet "gamma" map,
    whose ``eps`` has K components for a (K-1)-dimensional ``z``)."""
    return getattr(case.family, "standardization", None) != "gamma"


def _has_density(case):
    """``log_prob_standardized`` is a density of ``eps`` (not for beta "zero-correction",
    where it is the constant 0 by construction, nor for the literal Dirichlet "paper" map,
    whose ``eps`` lies on a (K-1)-dimensional surface of R^K)."""
    return _has_inverse(case) and getattr(case.family, "standardization", None) not in (
        "zero-correction",
        "paper",
    )


# --- draws and everything computed from them (one jit compilation per family type) ---------


def _structural(family):
    """``family`` without its ``init_*`` options, so that cases differing only in their
    parameter values share one compilation."""
    defaults = {f.name: f.default for f in dataclasses.fields(family) if f.name.startswith("init_")}
    return dataclasses.replace(family, **defaults)


def _log_space(family, params, eps):
    """The exact coordinate of ``z = T(eps)`` that never underflows: ``log z`` (gamma,
    log-normal, Dirichlet), ``logit z`` (beta), ``z`` (normal). Affine in ``eps`` for the
    1-D families."""
    if isinstance(family, Beta):
        return family.logit_transform(params, eps)
    if isinstance(family, Normal):
        return family.transform(params, eps)
    return family.log_transform(params, eps)


def _log_space_of_z(family, z):
    if isinstance(family, Beta):
        return jnp.log(z) - jnp.log1p(-z)
    if isinstance(family, Normal):
        return z
    return jnp.log(z)


@functools.partial(jax.jit, static_argnums=0)
def _evaluate(family, params, eps):
    # The log-space coordinate at eps = 0 and at the unit vectors (it is affine in eps for
    # every map but the Dirichlet "full" / "diagonal" ones, whose log-ratios are affine).
    zeros = jnp.zeros(eps.shape[1:], eps.dtype)
    basis = jnp.concatenate([zeros[None], jnp.eye(zeros.size, dtype=eps.dtype).reshape((-1,) + zeros.shape)])
    out = {"basis": _log_space(family, params, basis)}
    out["z"] = family.transform(params, eps)
    out["statistic"] = _log_space(family, params, eps)
    out["statistic_of_z"] = _log_space_of_z(family, out["z"])
    out["log_prob"] = family.log_prob(params, out["z"])
    out["log_prob_standardized"] = family.log_prob_standardized(params, eps)
    if getattr(family, "standardization", None) != "gamma":
        out["eps_of_z"] = family.standardize(params, out["z"])
        out["statistic_round_trip"] = _log_space(family, params, out["eps_of_z"])
        out["log_jacobian"] = family.log_abs_det_jacobian(params, eps)
    return out


def _unclamped(family, z, statistic):
    """Draws whose ``z`` is exactly ``exp`` / ``sigmoid`` of the log-space coordinate."""
    if isinstance(family, Normal):
        keep = np.ones(z.shape, bool)
    elif isinstance(family, Beta):
        keep = (statistic > LOG_LOWER + 1.0) & (z < UPPER_Z)
    else:
        keep = (statistic > LOG_LOWER + 1.0) & (statistic < numerics.log_huge(jnp.float32) - 1.0)
    if family.event_ndim:
        keep = keep.all(-1)
    return keep


@functools.cache
def _draws(index):
    """``NUM_DRAWS`` standardized draws of case ``index`` and what the family computes from
    them, as float64 numpy. Sampling runs outside ``jit`` so that the sampler's compilation
    (per latent shape) is shared by all cases and test files."""
    case = CASES[index]
    key = jax.random.fold_in(jax.random.key(20261126), index)
    eps = case.family.sample_standardized(case.params, key, (NUM_DRAWS,))
    out = _evaluate(_structural(case.family), case.params, eps)
    out = {name: np.asarray(value, np.float64) for name, value in out.items()}
    out["eps"] = np.asarray(eps, np.float64)
    out["unclamped"] = _unclamped(case.family, out["z"], out["statistic"])
    return out


def _location_and_min_scale(case, draws):
    """``T``'s log-space coordinate at ``eps = 0``, and the smallest singular value of the
    derivative in ``eps`` of the standardized statistic (the coordinate itself for 1-D
    families and the "paper" map, the log-ratios ``log z_i - log z_K`` for the Dirichlet
    "full" and "diagonal" maps), which is affine: how much an error in the coordinate is
    amplified in ``eps``. By differences (beta "zero-correction" stops ``eps``'s gradient)."""
    basis = draws["basis"]
    if case.family.event_ndim and case.family.standardization != "paper":
        basis = basis[:, :-1] - basis[:, -1:]
    columns = basis[1:] - basis[0]
    return draws["basis"][0], float(np.linalg.svd(np.atleast_2d(columns), compute_uv=False).min())


@pytest.fixture(scope="module", autouse=True)
def _release_cached_draws():
    """The cached draws (a few hundred MB as float64) are freed when this module is done."""
    yield
    _draws.cache_clear()


def _assert_within(estimate, standard_error, exact, what):
    z_score = (np.asarray(estimate) - np.asarray(exact)) / np.asarray(standard_error)
    assert np.all(np.abs(z_score) < MAX_STANDARD_ERRORS), (
        f"{what}: estimate {estimate}, exact {exact}, {z_score} standard errors"
    )


# --- reference distributions (scipy, float64) -----------------------------------------------


def _marginals(case):
    """scipy distributions of ``z`` (1-D) or of each ``z_i`` (Dirichlet: Beta(a_i, a0 - a_i))."""
    natural, family = case.natural, case.family
    if isinstance(family, Gamma):
        return [stats.gamma(natural["concentration"], scale=1.0 / natural["rate"])]
    if isinstance(family, LogNormal):
        return [stats.lognorm(natural["scale"], scale=np.exp(natural["loc"]))]
    if isinstance(family, Normal):
        return [stats.norm(natural["loc"], natural["scale"])]
    if isinstance(family, Beta):
        return [stats.beta(natural["concentration1"], natural["concentration0"])]
    alpha = natural["concentration"]
    return [stats.beta(a, alpha.sum() - a) for a in alpha]


def _log_space_cdf(case, component=0):
    """CDF of the coordinate of :func:`_ks_statistic` (``log z``, ``logit z``, ``z``, or
    ``logit z_i`` for a Dirichlet marginal), from the scipy CDF of ``z`` by the monotone map;
    tails evaluated where ``exp`` does not underflow float64."""
    family, natural = case.family, case.natural
    if isinstance(family, Gamma):
        a, b = float(natural["concentration"]), float(natural["rate"])
        dist = stats.gamma(a, scale=1.0 / b)

        def cdf(t):
            # P(z <= e^t) ~ (b e^t)^a / Gamma(a + 1) where e^t underflows float64.
            with np.errstate(under="ignore"):
                return np.where(
                    t + np.log(b) < -700.0,
                    np.exp(a * (t + np.log(b)) - special.gammaln(a + 1.0)),
                    dist.cdf(np.exp(t)),
                )

        return cdf
    if isinstance(family, LogNormal):
        dist = _marginals(case)[0]
        return lambda t: dist.cdf(np.exp(t))
    if isinstance(family, Normal):
        return _marginals(case)[0].cdf
    if isinstance(family, Beta):
        a, b = float(natural["concentration1"]), float(natural["concentration0"])
        lower, upper = stats.beta(a, b), stats.beta(b, a)
        return lambda t: np.where(t < 0, lower.cdf(special.expit(t)), upper.sf(special.expit(-t)))
    alpha = natural["concentration"]
    a, rest = float(alpha[component]), float(alpha.sum() - alpha[component])
    lower, upper = stats.beta(a, rest), stats.beta(rest, a)
    return lambda t: np.where(t < 0, lower.cdf(special.expit(t)), upper.sf(special.expit(-t)))


def _ks_statistic(case, statistic, component):
    """The exact coordinate whose CDF :func:`_log_space_cdf` gives: ``log z``, ``logit z`` or
    ``z``; for a Dirichlet marginal ``logit z_i = log z_i - log sum_{j != i} z_j`` (float32's
    ``log z_i`` rounds to 0 within 6e-8 of ``z_i = 1``, which would tie many draws at 0)."""
    if not case.family.event_ndim:
        return statistic[:, 0]
    others = np.delete(statistic, component, axis=1)
    return statistic[:, component] - special.logsumexp(others, axis=1)


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("index", _select(_has_inverse))
def test_standardization_round_trips(index):
    """``T(T^{-1}(z)) = z`` and ``T^{-1}(T(eps)) = eps`` to float32 accuracy.

    Compared in the log-space coordinate ``s`` (``log z``, ``logit z``, ``z``), which is affine
    in ``eps``: ``s = loc + S eps``. Float32 arithmetic on ``s - loc`` and back loses a few ulps
    of ``|s| + |loc|``, so ``|s(T(T^{-1}(z))) - s(z)| <= 16 eps32 (1 + |s| + |loc|)``. In ``eps``
    that error is divided by the smallest singular value of ``S``; ``z`` itself adds its
    rounding (``eps32`` in ``log z``, ``eps32 / (1 - z)`` in ``logit z``). Deterministic.
    """
    case = CASES[index]
    draws = _draws(index)
    location, min_scale = _location_and_min_scale(case, draws)
    magnitude = 1.0 + np.abs(draws["statistic_of_z"]) + np.abs(location)
    if case.family.event_ndim:
        magnitude = magnitude.max(-1)

    # z -> eps -> z (every draw: the clamped z is a point of the support too).
    error = np.abs(draws["statistic_round_trip"] - draws["statistic_of_z"])
    if case.family.event_ndim:
        error = error.max(-1)
    assert np.all(error <= 16 * EPS32 * magnitude), (
        f"max error / (eps32 scale) {np.max(error / (EPS32 * magnitude))}"
    )

    # eps -> z -> eps, where z = T(eps) is not clamped.
    keep = draws["unclamped"]
    assert keep.mean() > 0.5
    error = np.abs(draws["eps_of_z"] - draws["eps"])
    if case.family.event_ndim:
        error = error.max(-1)
    if isinstance(case.family, Beta):
        rounding = EPS32 * (1.0 + 1.0 / (1.0 - draws["z"]))
    else:
        rounding = EPS32
    # A log-ratio carries the errors of two log z's.
    amplification = (2.0 if case.family.event_ndim else 1.0) / min_scale
    bound = (16 * EPS32 * magnitude + rounding) * amplification
    assert np.all(error[keep] <= bound[keep]), f"max error / bound {np.max(error[keep] / bound[keep])}"


# --- distribution of eps -----------------------------------------------------------------------


@pytest.mark.parametrize("index", _select())
def test_standardized_moments_do_not_depend_on_parameters(index):
    """``E[eps] = 0`` for every family and parameter (so it does not depend on ``v``);
    ``E[eps eps^T]`` is the identity (gamma, log-normal, normal, beta "logit", Dirichlet
    "full", "gamma", "paper"), has unit diagonal (Dirichlet "diagonal"), or is
    ``psi_1(a) + psi_1(b)`` (beta "zero-correction", the paper's non-unit variance).

    Each entry is a mean of ``NUM_DRAWS`` iid terms compared within 5 of its sample standard
    errors (``eps`` has exponential or lighter tails, so the CLT is accurate here).
    """
    case = CASES[index]
    eps = _draws(index)["eps"].reshape(NUM_DRAWS, -1)
    root_n = np.sqrt(NUM_DRAWS)
    _assert_within(eps.mean(0), eps.std(0, ddof=1) / root_n, 0.0, "mean of eps")

    products = eps[:, :, None] * eps[:, None, :]
    second = products.mean(0)
    standard_error = products.std(0, ddof=1) / root_n
    standardization = getattr(case.family, "standardization", None)
    if standardization == "zero-correction":
        natural = case.natural
        expected = special.polygamma(1, natural["concentration1"]) + special.polygamma(
            1, natural["concentration0"]
        )
        _assert_within(second, standard_error, np.reshape(expected, (1, 1)), "E[w^2]")
    elif standardization == "diagonal":
        _assert_within(np.diag(second), np.diag(standard_error), 1.0, "E[eps_i^2]")
    else:
        _assert_within(second, standard_error, np.eye(eps.shape[1]), "E[eps eps^T]")


# --- distribution of z -------------------------------------------------------------------------


@pytest.mark.parametrize("index", _select())
def test_sample_moments_match_mean_and_variance(index):
    """Sample mean and variance of ``z`` against ``mean()`` and ``variance()`` within 5
    standard errors, each computed from the exact moments (scipy): ``sqrt(var / n)`` for the
    mean, ``var sqrt((kurtosis + 2) / n)`` for the variance. ``mean()`` and ``variance()``
    also equal scipy's values to float32 accuracy.

    The clamp of ``z`` at 1e-30 (or within 1.6e-7 of 1) moves a draw by less than 2e-7, far
    below the standard errors.
    """
    case = CASES[index]
    z = _draws(index)["z"].reshape(NUM_DRAWS, -1)
    mean = np.ravel(np.asarray(case.family.mean(case.params), np.float64))
    variance = np.ravel(np.asarray(case.family.variance(case.params), np.float64))
    marginals = _marginals(case)
    np.testing.assert_allclose(mean, [m.mean() for m in marginals], rtol=2e-5)
    np.testing.assert_allclose(variance, [m.var() for m in marginals], rtol=1e-4)

    excess_kurtosis = np.array([float(m.stats(moments="k")) for m in marginals])
    _assert_within(z.mean(0), np.sqrt(variance / NUM_DRAWS), mean, "sample mean")
    _assert_within(
        z.var(0, ddof=1), variance * np.sqrt((excess_kurtosis + 2.0) / NUM_DRAWS), variance, "sample variance"
    )


@pytest.mark.parametrize("index", _select())
def test_entropy_matches_monte_carlo(index):
    """``entropy()`` against ``-mean(log q(z))`` within 5 standard errors, and against scipy's
    closed form to float32 accuracy.

    ``log q(z)`` is ``log_prob(z)``. Where ``z`` meets the float32 clamp (gamma shapes 0.01,
    0.1; beta 0.1; Dirichlet 0.1), ``log_prob`` at the clamped ``z`` is not ``log q`` of the
    draw, so there ``log q = log_prob_standardized(eps) - log_abs_det_jacobian(eps)``, exact in
    log space (and equal to ``log_prob(T(eps))`` on unclamped draws, see
    :func:`test_log_prob_standardized_is_change_of_variables`).
    """
    case = CASES[index]
    draws = _draws(index)
    if case.near_clamp:
        log_q = draws["log_prob_standardized"] - draws["log_jacobian"]
    else:
        log_q = draws["log_prob"]
    entropy = float(np.asarray(case.family.entropy(case.params), np.float64))
    # Floor: a uniform q (beta(1, 1), Dirichlet(1, 1, 1)) has a constant log q.
    standard_error = max(log_q.std(ddof=1) / np.sqrt(NUM_DRAWS), 1e-6 * (1.0 + abs(entropy)))
    _assert_within(-log_q.mean(), standard_error, entropy, "entropy")

    family, natural = case.family, case.natural
    if isinstance(family, Dirichlet):
        reference = stats.dirichlet(natural["concentration"]).entropy()
    else:
        reference = float(_marginals(case)[0].entropy())
    assert abs(entropy - reference) <= 1e-5 * (1.0 + abs(reference)) + 1e-6 * _cancelling_terms(case)


def _cancelling_terms(case):
    """Size of the terms that cancel in ``log q`` and the entropy (float32 keeps ~eps32 of
    each): ``|x psi(x)| + |log Gamma(x)|`` over the concentrations (and their sum), or
    ``|loc| + |log scale|``."""
    natural = case.natural
    if isinstance(case.family, (LogNormal, Normal)):
        return float(abs(natural["loc"]) + abs(np.log(natural["scale"])))
    values = np.concatenate([np.ravel(v) for v in natural.values()])
    if isinstance(case.family, (Beta, Dirichlet)):
        values = np.append(values, values.sum())
    return float(np.sum(np.abs(values * special.digamma(values)) + np.abs(special.gammaln(values))))


def _ks_components(case):
    return range(case.family.shape[-1]) if case.family.event_ndim else range(1)


@pytest.mark.parametrize("index", _select())
def test_samples_match_scipy_distribution(index):
    """Kolmogorov-Smirnov test of the draws against scipy (``gamma``, ``lognorm``, ``norm``,
    ``beta``; each Dirichlet marginal ``z_i ~ Beta(a_i, a0 - a_i)``), p > 1e-3.

    The statistic is computed on an exact log-space coordinate (``log z``, ``logit z``) with
    the scipy CDF composed with ``exp`` / ``sigmoid``: KS is invariant under monotone maps, so
    this is the test of ``z`` itself, without the float32 clamp that piles half of the gamma
    shape-0.01 draws onto ``z = 1e-30``. A correct sampler fails with probability 1e-3 per
    marginal; the first 20,000 draws detect a CDF error of ~0.014.
    """
    case = CASES[index]
    statistic = _draws(index)["statistic"].reshape(NUM_DRAWS, -1)[:KS_NUM_DRAWS]
    for component in _ks_components(case):
        sample = _ks_statistic(case, statistic, component)
        result = stats.kstest(sample, _log_space_cdf(case, component))
        assert result.pvalue > KS_MIN_P_VALUE, f"component {component}: {result}"


# --- densities -----------------------------------------------------------------------------------


def _is_change_of_variables(case):
    return _has_inverse(case) and getattr(case.family, "standardization", None) != "zero-correction"


@pytest.mark.parametrize("index", _select(_is_change_of_variables))
def test_log_prob_standardized_is_change_of_variables(index):
    """``log_prob_standardized(eps) = log_prob(T(eps)) + log_abs_det_jacobian(eps)`` (paper
    Eq. 3) on every unclamped draw, to ``1e-5`` times the size of the terms (float32 loses a
    few ulps of each of ``a log b``, ``(a - 1) log z``, ``b z``, ``log Gamma(a)``), plus the
    rounding of ``z`` itself where ``log_prob`` needs ``1 - z`` (beta: ``|b - 1| eps32 / (1 - z)``;
    the family's own form works in ``logit z`` and does not lose it).

    Not for beta "zero-correction", whose ``log_prob_standardized`` is 0 by construction
    (``sigma`` is chosen per draw so that ``g_corr = 0``): there only ``log J`` is checked
    (:func:`test_log_abs_det_jacobian_matches_autodiff`). Deterministic.
    """
    case = CASES[index]
    draws = _draws(index)
    keep = draws["unclamped"]
    expected = draws["log_prob"] + draws["log_jacobian"]
    size = (
        1.0
        + np.abs(draws["log_prob"])
        + np.abs(draws["log_jacobian"])
        + np.abs(draws["statistic"]).reshape(NUM_DRAWS, -1).sum(-1) * _largest_natural(case)
        + _cancelling_terms(case)
    )
    tolerance = 1e-5 * size
    if isinstance(case.family, Beta):
        tolerance = tolerance + 4 * EPS32 * abs(case.natural["concentration0"] - 1.0) / (1.0 - draws["z"])
    error = np.abs(draws["log_prob_standardized"] - expected)
    assert np.all(error[keep] <= tolerance[keep]), (
        f"max error / tolerance {np.max(error[keep] / tolerance[keep])}"
    )


def _largest_natural(case):
    return float(max(np.max(np.abs(v)) for v in case.natural.values()))


@functools.partial(jax.jit, static_argnums=0)
def _coordinate_and_derivative(family, params, eps):
    """The log-space coordinate and its derivative in ``eps`` (per draw)."""

    def coordinate(e):
        return _log_space(family, params, e)

    if getattr(family, "standardization", None) == "zero-correction":
        return coordinate(eps), coordinate(eps + 1.0) - coordinate(eps)
    if family.event_ndim == 0:
        return coordinate(eps), jax.vmap(jax.grad(coordinate))(eps)
    return coordinate(eps), jax.vmap(jax.jacfwd(coordinate))(eps)


@pytest.mark.parametrize("index", _select(_has_inverse))
def test_log_abs_det_jacobian_matches_autodiff(index):
    """``log_abs_det_jacobian`` (float32) against ``log |det dT/deps|`` from autodiff in
    float64, on 500 unclamped draws. ``T`` factors as ``eps -> s -> z`` with ``s`` the
    log-space coordinate; ``ds/deps`` comes from ``jax.grad`` / ``jax.jacfwd`` (beta
    "zero-correction" stops the gradient through ``eps`` by design, so there
    ``s(eps + 1) - s(eps)``, exact since ``s`` is affine in ``eps``), and ``log |dz/ds|`` is the
    elementary ``log z`` or ``log z + log(1 - z)``, evaluated from ``s`` so that it is exact
    where ``z`` is tiny or near 1. Dirichlet "full" and "diagonal": ``T`` onto K-1 coordinates
    of the simplex (the density's; the determinant does not depend on which coordinate is
    dropped, so the largest ``z_i`` is, whose ``d log z_i = dy_i - d logsumexp(y)`` would cancel
    near a vertex); "paper": ``T`` as a map of R^K. Tolerance ``1e-4 (1 + |log J|)``:
    a few float32 ulps of each term. Deterministic."""
    case = CASES[index]
    draws = _draws(index)
    keep = np.flatnonzero(draws["unclamped"])[:500]
    expected = draws["log_jacobian"][keep]
    with jax.enable_x64(True):
        params = jax.tree_util.tree_map(lambda value: jnp.asarray(value, jnp.float64), case.params)
        eps = jnp.asarray(draws["eps"][keep], jnp.float64)
        statistic, derivative = (
            np.asarray(x) for x in _coordinate_and_derivative(_structural(case.family), params, eps)
        )
    family, standardization = case.family, getattr(case.family, "standardization", None)
    if family.event_ndim == 0:
        log_jacobian = np.log(np.abs(derivative))
        if isinstance(family, Beta):
            log_jacobian += -np.logaddexp(0.0, -statistic) - np.logaddexp(0.0, statistic)
        elif not isinstance(family, Normal):
            log_jacobian += statistic
    elif standardization == "paper":
        log_jacobian = np.linalg.slogdet(derivative)[1] + statistic.sum(-1)
    else:
        # Onto the simplex: |det| is the same whichever coordinate is dropped; drop the
        # largest z_i, whose log z_i = y_i - logsumexp(y) would cancel near a vertex.
        kept = np.argsort(statistic, axis=1)[:, :-1]
        rows = np.take_along_axis(derivative, kept[:, :, None], axis=1)
        log_jacobian = np.linalg.slogdet(rows)[1] + np.take_along_axis(statistic, kept, axis=1).sum(-1)
    np.testing.assert_allclose(expected, log_jacobian, rtol=1e-4, atol=1e-4)


def _integration_cases():
    return _select(
        lambda case: _has_density(case) and (case.family.event_ndim == 0 or case.family.shape[-1] == 2)
    )


@functools.partial(jax.jit, static_argnums=0)
def _densities_on_grid(family, params, grid):
    eps = grid if family.event_ndim == 0 else grid[:, None]
    own = family.log_prob_standardized(params, eps)
    change_of_variables = family.log_prob(
        params, family.transform(params, eps)
    ) + family.log_abs_det_jacobian(params, eps)
    return own, change_of_variables


@pytest.mark.parametrize("index", _integration_cases())
def test_standardized_density_integrates_to_one(index):
    """``q_eps`` integrates to 1 over ``eps`` (trapezoid rule on [-40, 40], step 1e-3) for
    every 1-D standardization (and the Dirichlet with K = 2, whose ``eps`` is 1-D), both as
    the family's ``log_prob_standardized`` and as ``log_prob(T(eps)) + log J`` (which checks
    the Jacobian). ``q_eps`` has exponential or lighter tails in ``eps`` (rate >= 1 here), so
    the truncation error is below 1e-13; float32 density values err by ~1e-6 relative.

    The change-of-variables form is skipped where ``z`` meets the float32 clamp on a
    noticeable part of the grid's mass (gamma shapes <= 0.1, beta 0.1): there ``log_prob`` sees
    the clamped ``z``. Tolerance 1e-4. Deterministic.
    """
    case = CASES[index]
    grid = np.linspace(-40.0, 40.0, 80_001)
    own, change_of_variables = _densities_on_grid(
        _structural(case.family), case.params, jnp.asarray(grid, jnp.float32)
    )
    with np.errstate(under="ignore"):
        total = np.trapezoid(np.exp(np.asarray(own, np.float64)), grid)
    assert abs(total - 1.0) < 1e-4, f"integral of exp(log_prob_standardized) = {total}"
    if not case.near_clamp:
        with np.errstate(under="ignore"):
            total = np.trapezoid(np.exp(np.asarray(change_of_variables, np.float64)), grid)
        assert abs(total - 1.0) < 1e-4, f"integral of q(T(eps)) J(eps) = {total}"


# --- float32 at tiny shapes --------------------------------------------------------------------

TINY_SHAPES = (1e-3, 1e-2, 0.1)


def _tiny_family(kind, shape):
    if kind == "gamma":
        return Gamma(init_concentration=shape)
    if kind.startswith("beta-"):
        standardization = kind.removeprefix("beta-")
        return Beta(init_concentration1=shape, init_concentration0=shape, standardization=standardization)
    standardization = kind.removeprefix("dirichlet-")
    return Dirichlet(shape=(4,), init_concentration=shape, standardization=standardization)


TINY_KINDS = (
    "gamma",
    "beta-logit",
    "beta-zero-correction",
    "dirichlet-full",
    "dirichlet-diagonal",
    "dirichlet-gamma",
    "dirichlet-paper",
)


@pytest.mark.parametrize("shape", TINY_SHAPES)
@pytest.mark.parametrize("kind", TINY_KINDS)
def test_float32_tiny_shapes_are_finite(kind, shape):
    """Float32 at concentrations 1e-3, 1e-2, 0.1: ``NUM_DRAWS`` standardized draws are finite,
    so is their log-space coordinate (``log z`` about -1000 at shape 1e-3), and ``z = T(eps)``
    is inside its support: never 0 or inf (or 1 for the beta), although ``z`` itself would
    underflow float32 in almost every draw at 1e-3. (``tests/test_grep.py`` checks that the
    G-REP gradients of the conjugate models are finite at these shapes.) Deterministic."""
    family = _tiny_family(kind, shape)
    params = family.init_params()
    eps = family.sample_standardized(params, jax.random.key(7), (NUM_DRAWS,))
    assert eps.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(eps)))
    assert bool(jnp.all(jnp.isfinite(_log_space(family, params, eps))))
    z = np.asarray(family.transform(params, eps))
    assert np.all(np.isfinite(z)) and np.all(z > 0)
    if isinstance(family, Beta):
        assert np.all(z < 1)


# --- parameter initialization ------------------------------------------------------------------


def _expected_natural(family):
    """What ``natural_params(init_params())`` must return, from the family's init options."""
    if isinstance(family, Gamma):
        a, m = family.init_concentration, family.init_mean
        return {"concentration": a, "rate": a / m}
    if isinstance(family, (LogNormal, Normal)):
        return {"loc": family.init_loc, "scale": family.init_scale}
    if isinstance(family, Beta):
        return {"concentration1": family.init_concentration1, "concentration0": family.init_concentration0}
    return {"concentration": family.init_concentration}


INIT_FAMILIES = (
    [
        Gamma(shape=(2, 3), init_concentration=a, init_mean=m)
        for a in (1e-3, 0.1, 1.0, 100.0, 1e4)
        for m in (1e-3, 1.0, 50.0)
    ]
    + [
        LogNormal(shape=(4,), init_loc=loc, init_scale=s)
        for loc in (-3.0, 0.0, 2.5)
        for s in (1e-3, 1.0, 30.0)
    ]
    + [Normal(shape=(4,), init_loc=loc, init_scale=s) for loc in (-3.0, 2.5) for s in (1e-3, 1.0, 30.0)]
    + [
        Beta(shape=(3,), init_concentration1=a, init_concentration0=b)
        for a in (1e-3, 0.5, 100.0)
        for b in (0.01, 2.0, 1e3)
    ]
    + [Dirichlet(shape=(2, 4), init_concentration=a) for a in (1e-3, 0.1, 1.0, 10.0, 1e3)]
)


@pytest.mark.parametrize("family", INIT_FAMILIES, ids=repr)
def test_init_params_round_trip(family):
    """``natural_params(init_params())`` equals the requested init values (float32: the
    softplus round trip loses a few ulps, ``rtol = 2e-6``); ``mean()`` of the gamma equals
    ``init_mean``; parameters are float32 arrays of the family's shape. Deterministic."""
    params = family.init_params()
    for value in params.values():
        assert value.shape == family.shape and value.dtype == jnp.float32
    natural = family.natural_params(params)
    for name, expected in _expected_natural(family).items():
        np.testing.assert_allclose(
            np.asarray(natural[name], np.float64), np.full(family.shape, expected), rtol=2e-6, err_msg=name
        )
    if isinstance(family, Gamma):
        np.testing.assert_allclose(np.asarray(family.mean(params)), family.init_mean, rtol=2e-6)


def test_gamma_gradients_in_the_mean_are_finite_and_exact_at_tiny_means():
    """BBVI's score drove MF weights to means ~1e-21 at eta = 5, where the derivative through
    ``log(alpha / mean)`` or ``alpha z / mean`` overflows float32 (``mean^2`` underflows)."""
    family = Gamma(shape=(4,))
    alpha = np.float32(16.0)
    mean = np.array([1e-15, 1e-21, 1e-25, 1e-29], np.float32)
    params = {
        "concentration": jnp.full(4, numerics.inverse_softplus(alpha - family.min_concentration)),
        "mean": jnp.asarray(numerics.inverse_softplus(mean - family.min_mean)),
    }
    z = jnp.asarray(mean * np.array([0.5, 1.5, 2.0, 0.8], np.float32))
    dmean_dv = jax.nn.sigmoid(params["mean"])

    score = jax.grad(lambda p: jnp.sum(family.log_prob(p, z)))(params)["mean"]
    actual_mean = family.mean(params)
    expected = alpha * (z / actual_mean - 1.0) / actual_mean * dmean_dv  # d/dm log q = a (z/m - 1) / m
    assert np.all(np.isfinite(score))
    np.testing.assert_allclose(score, expected, rtol=2e-3)

    entropy = jax.grad(lambda p: jnp.sum(family.entropy(p)))(params)["mean"]
    np.testing.assert_allclose(entropy, dmean_dv / actual_mean, rtol=2e-3)  # d/dm H = 1 / m

    eps = jnp.array([0.3, -1.0, 2.0, 0.0], jnp.float32)
    log_transform = jax.grad(lambda p: jnp.sum(family.log_transform(p, eps)))(params)["mean"]
    np.testing.assert_allclose(log_transform, dmean_dv / actual_mean, rtol=2e-3)  # d/dm log z = 1 / m
