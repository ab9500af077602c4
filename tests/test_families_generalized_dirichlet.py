"""The generalized Dirichlet family (beta sticks): its Dirichlet members, its moments and
entropy against draws, its Fisher information, small shapes, and the default fit that uses it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import betaln

import grepvi
from grepvi import numerics
from grepvi.families import Dirichlet, GeneralizedDirichlet

TOLERANCE = 5.0  # Monte Carlo standard errors


def _params(a, b, dtype=jnp.float64):
    floor = GeneralizedDirichlet(shape=(2,)).sticks.min_concentration
    return {
        "concentration1": numerics.inverse_softplus(jnp.asarray(a, dtype) - floor),
        "concentration0": numerics.inverse_softplus(jnp.asarray(b, dtype) - floor),
    }


def _as_sticks(alpha):
    """The generalized Dirichlet equal to ``Dirichlet(alpha)``: ``a_k = alpha_k``, ``b_k =
    alpha_{k+1} + ... + alpha_{K-1}``."""
    alpha = np.asarray(alpha, np.float64)
    return alpha[..., :-1], np.cumsum(alpha[..., ::-1], -1)[..., ::-1][..., 1:]


def test_every_dirichlet_is_a_member():
    with jax.enable_x64(True):
        alpha = np.array([[0.7, 2.0, 1.3, 3.1], [0.1, 0.05, 4.0, 0.3]])
        dirichlet = Dirichlet(shape=alpha.shape)
        family = GeneralizedDirichlet(shape=alpha.shape)
        d = {"concentration": numerics.inverse_softplus(jnp.asarray(alpha))}
        g = _params(*_as_sticks(alpha))
        x = jnp.asarray([[0.1, 0.3, 0.25, 0.35], [1e-6, 0.2, 0.7, 0.099999]])
        np.testing.assert_allclose(family.log_prob(g, x), dirichlet.log_prob(d, x), rtol=1e-10)
        for method in ("entropy", "mean", "variance", "log_space_mean"):
            np.testing.assert_allclose(
                getattr(family, method)(g), getattr(dirichlet, method)(d), rtol=1e-10, err_msg=method
            )


@pytest.mark.parametrize(
    "a, b",
    [
        ([1.0, 2.0, 0.5], [0.3, 1.5, 4.0]),
        ([0.1, 0.1, 0.1], [0.1, 0.1, 0.1]),
        ([40.0, 5.0, 80.0], [9.0, 70.0, 3.0]),
    ],
    ids=["unequal", "shape-0.1", "concentrated"],
)
def test_moments_and_entropy_match_draws(a, b):
    with jax.enable_x64(True):
        family = GeneralizedDirichlet(shape=(4,))
        params = _params(a, b)
        eps = family.sample_standardized(params, jax.random.key(0), (200_000,))
        log_x = family.log_transform(params, eps)
        assert np.all(np.isfinite(log_x)), "log-space draws are exact at small shapes"
        x = np.exp(np.asarray(log_x))
        np.testing.assert_allclose(x.sum(-1), 1.0, rtol=1e-12)
        n = x.shape[0]
        se = x.std(0) / np.sqrt(n)
        assert np.all(np.abs(x.mean(0) - family.mean(params)) < TOLERANCE * se)
        squares = (x - np.asarray(family.mean(params))) ** 2
        assert np.all(
            np.abs(squares.mean(0) - family.variance(params)) < TOLERANCE * squares.std(0) / np.sqrt(n)
        )
        neg_log_q = -np.asarray(family.log_prob_log_space(params, log_x))
        assert abs(neg_log_q.mean() - float(family.entropy(params))) < TOLERANCE * neg_log_q.std() / np.sqrt(
            n
        )


def test_standardization_is_the_sticks_and_inverts():
    with jax.enable_x64(True):
        family = GeneralizedDirichlet(shape=(2, 3))
        params = _params([[1.0, 2.0], [0.3, 5.0]], [[0.5, 1.5], [2.0, 0.2]])
        eps = family.sample_standardized(params, jax.random.key(1), (7,))
        z = family.transform(params, eps)
        np.testing.assert_allclose(family.standardize(params, z), eps, rtol=1e-8, atol=1e-8)
        np.testing.assert_allclose(
            family.log_prob_standardized(params, eps),
            family.log_prob(params, z) + family.log_abs_det_jacobian(params, eps),
            rtol=1e-10,
        )
        # log q_eps's parameter dependence is the sticks' (what G-REP's g_corr weighs)
        np.testing.assert_allclose(
            family.log_prob_standardized(params, eps),
            jnp.sum(family.sticks.log_prob_standardized(params, eps), -1),
            rtol=1e-12,
        )


def test_fisher_information_is_the_sticks_exponential_family_hessian():
    """In ``(a, b)`` the Fisher information of independent beta sticks is the Hessian of ``sum
    log B(a_k, b_k)``; in the stored ``v = softplus^{-1}``, ``J^T H J`` with ``J = sigmoid(v)``."""
    with jax.enable_x64(True):
        family = GeneralizedDirichlet(shape=(4,))
        params = _params([1.0, 2.0, 0.5], [0.3, 1.5, 4.0])
        natural = family.natural_params(params)
        ab = jnp.concatenate([natural["concentration1"], natural["concentration0"]])
        hessian = jax.hessian(lambda t: jnp.sum(betaln(t[:3], t[3:])))(ab)
        jacobian = jnp.concatenate(
            [jax.nn.sigmoid(params["concentration1"]), jax.nn.sigmoid(params["concentration0"])]
        )
        fisher = jacobian[:, None] * hessian * jacobian[None, :]
        delta = {"concentration1": jnp.array([0.3, -0.2, 0.1]), "concentration0": jnp.array([-0.1, 0.4, 0.2])}
        flat = jnp.concatenate([delta["concentration1"], delta["concentration0"]])
        np.testing.assert_allclose(family.fisher_quad(params, delta), flat @ fisher @ flat, rtol=1e-10)
        natural_grad, squared = family.fisher_solve(params, delta)
        solved = jnp.linalg.solve(fisher, flat)
        np.testing.assert_allclose(
            jnp.concatenate([natural_grad["concentration1"], natural_grad["concentration0"]]),
            solved,
            rtol=1e-8,
        )
        np.testing.assert_allclose(squared, flat @ solved, rtol=1e-8)


numpyro = pytest.importorskip("numpyro")
dist = pytest.importorskip("numpyro.distributions")

from grepvi.interop.numpyro_model import from_numpyro  # noqa: E402

SOURCES = np.array(
    [[10.0, 2.0, 5.0, 1.0, 8.0, 3.0], [3.0, 9.0, 1.0, 6.0, 2.0, 7.0], [6.0, 5.0, 9.0, 8.0, 1.0, 1.0]]
)
WEIGHTS = np.array([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6], [0.1, 0.7, 0.2], [0.3, 0.3, 0.4]])
OBSERVED = (WEIGHTS @ SOURCES + 0.4 * np.random.default_rng(3).normal(size=(4, 6))).astype(np.float32)


def unmixing(y):
    """Each sample a mix of three known sources over six tracers (noise known): a concentrated
    posterior on the simplex whose spread differs by direction."""
    with numpyro.plate("samples", y.shape[0]):
        w = numpyro.sample("w", dist.Dirichlet(jnp.ones(3)))
        numpyro.sample("y", dist.Normal(w @ jnp.asarray(SOURCES, jnp.float32), 0.4).to_event(1), obs=y)


def _elbo(result, adapted, num_draws=20_000):
    """The fitted ``q``'s ELBO, estimated with ``num_draws`` draws (mean, standard error)."""
    (name,) = result.families
    family, params = result.families[name], result.params[name]
    eps = family.sample_standardized(params, jax.random.key(7), (num_draws,))
    log_x = family.log_transform(params, eps)
    log_joint = jax.vmap(lambda u: adapted.joint.logdensity_fn({name: u}, adapted.data))(log_x)
    values = np.asarray(log_joint - jnp.sum(family.log_prob_log_space(params, log_x), -1), np.float64)
    return values.mean(), values.std() / np.sqrt(num_draws)


def test_by_name_it_fits_unequal_spreads_better_than_the_default_dirichlet():
    adapted = from_numpyro(unmixing, OBSERVED)
    assert type(adapted.families["w"]) is grepvi.Dirichlet  # the default (the family's cost: docs)
    chosen = from_numpyro(unmixing, OBSERVED, families={"w": "generalized-dirichlet"})
    assert type(chosen.families["w"]) is GeneralizedDirichlet
    dirichlet = adapted.fit(progress=False)
    sticks = chosen.fit(progress=False)
    assert dirichlet.converged and sticks.converged
    elbo, se = _elbo(sticks, chosen)
    elbo_dirichlet, se_dirichlet = _elbo(dirichlet, adapted)
    # four simplices: the sticks' two shapes fit each direction's spread
    assert elbo - elbo_dirichlet > 5.0 * np.hypot(se, se_dirichlet), (elbo, se, elbo_dirichlet, se_dirichlet)


COUNTS = np.array([[3.0, 0.0, 5.0], [10.0, 2.0, 1.0]], np.float32)


def two_multinomials(counts):
    for i, name in enumerate(("p", "q")):
        probs = numpyro.sample(name, dist.Dirichlet(jnp.full(3, 0.5)))
        numpyro.sample(f"x{i}", dist.Multinomial(int(COUNTS[i].sum()), probs), obs=counts[i])


def test_rows_stack_and_a_default_fit_lands_on_the_exact_dirichlet_posterior():
    """Two generalized-Dirichlet sites stack into one latent of two rows; the exact posteriors
    ``Dirichlet(0.5 + x)`` are members of the family, and the default fit finds them."""
    from grepvi.inference import stacking

    adapted = from_numpyro(
        two_multinomials, COUNTS, families={"p": "generalized-dirichlet", "q": "generalized-dirichlet"}
    )
    plan = stacking.plan(adapted.families)
    assert plan is not None and list(plan.stacked_families) == ["p+q"]
    result = adapted.fit(progress=False)
    assert result.converged
    posterior = 0.5 + COUNTS.astype(np.float64)
    total = posterior.sum(-1, keepdims=True)
    mean = posterior / total
    sd = np.sqrt(posterior * (total - posterior) / (total**2 * (total + 1.0)))
    for i, name in enumerate(("p", "q")):
        family, params = result.families[name], result.params[name]
        fitted = np.asarray(family.mean(params), np.float64)
        assert np.all(np.abs(fitted - mean[i]) < 0.05 * sd[i]), (name, fitted, mean[i])
        fitted_sd = np.sqrt(np.asarray(family.variance(params), np.float64))
        np.testing.assert_allclose(fitted_sd, sd[i], rtol=0.05, err_msg=name)
