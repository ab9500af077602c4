"""Draws whose log density or gradient is not finite are left out of their step's average
(:func:`grepvi.estimators.grep._mean_of_draws`), up to a quarter of them; more, and the step
is skipped as before."""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grepvi
from grepvi.errors import NonFiniteStepWarning
from grepvi.estimators.base import EstimateInfo
from grepvi.estimators.grep import MAX_UNUSABLE_SHARE, _mean_of_draws
from grepvi.inference import controller
from grepvi.inference.fitting import _warn_unusable


def _draws(bad_rows, nonfinite=jnp.nan, in_elbo=False, n=8):
    rng = np.random.default_rng(0)
    grads = {
        "a": {"loc": rng.normal(size=(n, 3)).astype(np.float32)},
        "b": rng.normal(size=(n,)).astype(np.float32),
    }
    elbo = rng.normal(size=n).astype(np.float32)
    for row in bad_rows:
        if in_elbo:
            elbo[row] = nonfinite
        else:
            grads["a"]["loc"][row, 1] = nonfinite
    return jax.tree_util.tree_map(jnp.asarray, grads), EstimateInfo(elbo=jnp.asarray(elbo), extras={}), elbo


def test_every_draw_finite_is_the_plain_mean_bitwise():
    grads, info, _ = _draws([])
    mean, out = _mean_of_draws(grads, info, False)
    np.testing.assert_array_equal(np.asarray(mean["a"]["loc"]), np.asarray(jnp.mean(grads["a"]["loc"], 0)))
    np.testing.assert_array_equal(np.asarray(mean["b"]), np.asarray(jnp.mean(grads["b"], 0)))
    assert float(out.extras["unusable_draws"]) == 0.0


@pytest.mark.parametrize("nonfinite", [jnp.nan, jnp.inf, -jnp.inf])
def test_a_draw_with_a_nonfinite_gradient_is_left_out(nonfinite):
    grads, info, elbo = _draws([2], nonfinite)
    mean, out = _mean_of_draws(grads, info, False)
    keep = np.arange(8) != 2
    np.testing.assert_allclose(
        np.asarray(mean["a"]["loc"]), np.asarray(grads["a"]["loc"])[keep].mean(0), rtol=1e-6
    )
    np.testing.assert_allclose(np.asarray(mean["b"]), np.asarray(grads["b"])[keep].mean(0), rtol=1e-6)
    np.testing.assert_allclose(float(out.elbo), elbo[keep].mean(), rtol=1e-6)
    assert float(out.extras["unusable_draws"]) == pytest.approx(1 / 8)


def test_a_draw_with_a_nonfinite_elbo_term_is_left_out():
    grads, info, elbo = _draws([5], -jnp.inf, in_elbo=True)
    mean, out = _mean_of_draws(grads, info, False)
    keep = np.arange(8) != 5
    np.testing.assert_allclose(np.asarray(mean["b"]), np.asarray(grads["b"])[keep].mean(0), rtol=1e-6)
    assert np.isfinite(float(out.elbo))


def test_more_than_a_quarter_unusable_voids_the_step():
    """3 of 8 (37.5%) > MAX_UNUSABLE_SHARE: every draw averaged, the mean not finite (the
    step's guard skips it); 2 of 8 (25%) are left out."""
    assert MAX_UNUSABLE_SHARE == 0.25
    grads, info, _ = _draws([0, 3, 6])
    mean, out = _mean_of_draws(grads, info, False)
    assert not np.all(np.isfinite(np.asarray(mean["a"]["loc"])))
    assert float(out.extras["unusable_draws"]) == 0.0
    grads, info, _ = _draws([0, 3])
    mean, out = _mean_of_draws(grads, info, False)
    assert np.all(np.isfinite(np.asarray(mean["a"]["loc"])))
    assert float(out.extras["unusable_draws"]) == pytest.approx(0.25)


def test_the_carried_statistics_are_averaged_over_the_same_draws():
    grads, info, _ = _draws([4])
    statistics = {"a": jnp.arange(8.0)}
    mean, out, stats = _mean_of_draws(grads, info, False, statistics)
    keep = np.arange(8) != 4
    assert float(stats["a"]) == pytest.approx(np.arange(8.0)[keep].mean())
    statistics = {"a": jnp.arange(8.0).at[1].set(jnp.nan)}  # a non-finite statistic: left out too
    mean, out, stats = _mean_of_draws(grads, info, False, statistics)
    assert float(out.extras["unusable_draws"]) == pytest.approx(2 / 8)
    assert float(stats["a"]) == pytest.approx(
        np.arange(8.0)[(np.arange(8) != 4) & (np.arange(8) != 1)].mean()
    )


def test_the_warning_counts_only_the_steps_the_answer_averages():
    trial, average = controller.PHASES.index("trial"), controller.PHASES.index("average")
    arrays = {
        "unusable_draws": np.array([0.1, 0.0, 0.0, 0.0]),
        "phase": np.array([trial, trial, average, average]),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_unusable(arrays)  # left out on the way only: no warning
    arrays["unusable_draws"] = np.array([0.1, 0.0, 0.0625, 0.125])
    with pytest.warns(NonFiniteStepWarning, match=r"2 step\(s\) left some gradient draws out .*at most 12%"):
        _warn_unusable(arrays)


def _weibull_censored_model(t, censored):
    """A right-censored Weibull as a NumPyro user writes it: the survival term under a
    ``jnp.where`` whose branch not taken, ``log1p(-cdf)`` with ``cdf`` rounded to 1, is
    ``-inf`` for small ``lam`` (its gradient NaN); ``(t / lam)^k`` overflows float32 there."""
    import numpyro
    import numpyro.distributions as dist

    k = numpyro.sample("k", dist.LogNormal(0.0, 1.0))
    lam = numpyro.sample("lam", dist.Gamma(2.0, 1.0))
    d = dist.Weibull(lam, k)
    with numpyro.plate("n", t.shape[0]):
        numpyro.factor("lik", jnp.where(censored, jnp.log1p(-d.cdf(t)), d.log_prob(t)))


def _exact_posterior_moments(t, censored):
    """Means and sds of ``k`` and ``lam`` by quadrature on a grid in their logs (float64)."""
    from scipy import stats

    log_k, log_lam = np.meshgrid(np.linspace(-2.5, 2.0, 500), np.linspace(-2.5, 2.5, 500), indexing="ij")
    k, lam = np.exp(log_k), np.exp(log_lam)
    z = (t[None, None, :] / lam[..., None]) ** k[..., None]
    log_density = (
        np.log(k / lam)[..., None] + (k[..., None] - 1) * np.log(t[None, None, :] / lam[..., None]) - z
    )
    lik = np.where(censored[None, None, :], -z, log_density).sum(-1)
    log_post = lik + stats.lognorm(1.0).logpdf(k) + stats.gamma(2.0).logpdf(lam) + log_k + log_lam
    return _grid_moments(log_post, k=k, lam=lam)


def _grid_moments(log_post, **values):
    """``{name: (mean, sd)}`` of each grid of ``values`` under the unnormalized ``log_post``."""
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    moments = {}
    for name, x in values.items():
        mean = (w * x).sum()
        moments[name] = (mean, np.sqrt((w * (x - mean) ** 2).sum()))
    return moments


@pytest.mark.filterwarnings("ignore::grepvi.errors.NotConvergedWarning")
def test_a_censored_weibull_with_a_where_trap_fits_with_the_defaults():
    """Before draws could be left out, this fit stopped with a NumericalError (5 windows of
    non-finite steps: every step held a draw in the overflowing corner). Its answer: each
    mean within 0.25 posterior sd of the exact one (mean-field's own error on it: 0.05-0.1)."""
    pytest.importorskip("numpyro")
    from grepvi.interop.numpyro_model import from_numpyro

    rng = np.random.default_rng(48)
    t = rng.weibull(1.5, size=70) * 2.0
    censored = t > 3.0
    t = np.minimum(t, 3.0).astype(np.float32)
    result = from_numpyro(_weibull_censored_model, t, censored).fit(progress=False, seed=0)
    exact = _exact_posterior_moments(t.astype(np.float64), censored)
    for name, (mean, sd) in exact.items():
        fitted = float(np.asarray(result.posterior[name].mean()))
        assert abs(fitted - mean) < 0.25 * sd, (name, fitted, mean, sd)


_EMAX_DOSES = np.repeat(np.array([0.0, 1.0, 3.0, 10.0, 30.0, 100.0]), 8)
_EMAX_TOP, _EMAX_NOISE = 10.0, 1.0


def _emax_model(dose, y, safe=False):
    """An Emax curve written as users write it, ``(dose / ed50) ** hill``: at a dose of 0 with
    ``hill < 1`` the chain rule multiplies the power's infinite derivative by the quotient's
    zero one, and the gradient in ``ed50`` is NaN (its value is finite). ``q``'s start puts
    about half its draws there. ``safe``: the power computed only where the dose is positive
    (the error's advice)."""
    import numpyro
    import numpyro.distributions as dist

    ed50 = numpyro.sample("ed50", dist.LogNormal(jnp.log(10.0), 1.0))
    hill = numpyro.sample("hill", dist.LogNormal(0.0, 0.5))
    if safe:
        positive = dose > 0
        ratio = jnp.where(positive, jnp.where(positive, dose, 1.0) / ed50, 1.0) ** hill
        ratio = jnp.where(positive, ratio, 0.0)
    else:
        ratio = (dose / ed50) ** hill
    with numpyro.plate("n", dose.shape[0]):
        numpyro.sample("y", dist.Normal(_EMAX_TOP * ratio / (1.0 + ratio), _EMAX_NOISE), obs=y)


def _exact_emax_moments(dose, y):
    """Means and sds of ``ed50`` and ``hill`` by quadrature on a grid in their logs (float64)."""
    from scipy import stats

    log_ed50, log_hill = np.meshgrid(np.linspace(0.0, 4.5, 600), np.linspace(-1.5, 1.5, 600), indexing="ij")
    ed50, hill = np.exp(log_ed50), np.exp(log_hill)
    ratio = (dose[None, None, :] / ed50[..., None]) ** hill[..., None]
    curve = _EMAX_TOP * ratio / (1.0 + ratio)
    lik = stats.norm(curve, _EMAX_NOISE).logpdf(y[None, None, :]).sum(-1)
    prior = stats.lognorm(1.0, scale=10.0).logpdf(ed50) + stats.lognorm(0.5).logpdf(hill)
    return _grid_moments(lik + prior + log_ed50 + log_hill, ed50=ed50, hill=hill)


def test_an_emax_curve_with_a_nan_gradient_at_dose_zero_fits_with_the_defaults():
    """More than half of the start's draws have a NaN gradient in ``ed50`` (``inf * 0`` at the
    doses of 0, finite values): every float32 step is skipped, and the widened gradient takes
    the products with an exact zero factor as 0 (:mod:`grepvi.inference.zero_products`).
    Written as users write it and written safely (the power only where the dose is positive),
    the model fits with the defaults, each mean within 0.25 posterior sd of the exact one.
    (Before the zero products this fit stopped with a ``NumericalError``; leaving up to three
    quarters of the draws out instead was tried: the kept draws pulled ``hill`` below 1, 25
    usable of 64 at the first step, 6 at the sixth.)"""
    pytest.importorskip("numpyro")
    from grepvi.interop.numpyro_model import from_numpyro

    rng = np.random.default_rng(49)
    ratio = (_EMAX_DOSES / 12.0) ** 1.3
    noise = rng.normal(0.0, _EMAX_NOISE, _EMAX_DOSES.shape)
    y = (_EMAX_TOP * ratio / (1.0 + ratio) + noise).astype(np.float32)
    dose = _EMAX_DOSES.astype(np.float32)
    exact = _exact_emax_moments(_EMAX_DOSES, y.astype(np.float64))
    for safe in (False, True):
        result = from_numpyro(functools.partial(_emax_model, safe=safe), dose, y).fit(progress=False, seed=0)
        assert result.converged, safe
        for name, (mean, sd) in exact.items():
            fitted = float(np.asarray(result.posterior[name].mean()))
            assert abs(fitted - mean) < 0.25 * sd, (safe, name, fitted, mean, sd)


@jax.custom_jvp
def _kink(x):
    """0, with a NaN derivative below 1 (a finite value whose gradient no zero product mends)."""
    return jnp.zeros_like(x)


@_kink.defjvp
def _kink_jvp(primals, tangents):
    (x,), (tangent,) = primals, tangents
    return _kink(x), jnp.where(x < 1.0, jnp.nan, 0.0) * tangent


def test_a_gradient_nan_where_the_value_is_finite_stops_with_the_cause_and_its_fix():
    """About half of the start's draws of ``rate`` fall below 1, where the model's value is
    finite and its gradient NaN (not from a zero product): every step is skipped, and the
    stall's error says that the value was finite and how to write a power."""
    from grepvi.errors import NumericalError

    counts = jnp.array([3.0, 5.0, 4.0])

    def logdensity_fn(z):
        rate = z["rate"]
        return jnp.log(rate) - rate + jnp.sum(counts * jnp.log(rate) - rate) + _kink(rate)

    with pytest.raises(NumericalError, match=r"\['rate'\].*value was finite.*jnp.where\(x > 0, x, 1.0\)"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grepvi.fit(logdensity_fn, {"rate": grepvi.Gamma()}, progress=False, seed=0)
