"""Textbook models written as a NumPyro user writes them, with their small published data sets.

The test zoo of :func:`grepvi.interop.numpyro_model.from_numpyro` (``tests/test_numpyro_zoo.py``), with
NUTS and NumPyro ``AutoNormal`` references made by ``scripts/make_zoo_references.py``. Each entry
of :data:`ZOO` is ``(model, data)``: ``from_numpyro(model, *data)``. NumPyro is an optional extra.

* ``pumps``: hierarchical Poisson; failures of 10 power-plant pumps (Gaver & O'Muircheartaigh
  1987; the BUGS "Pumps" example): ``theta_i ~ Gamma(alpha, beta)``, ``x_i ~ Poisson(theta_i
  t_i)``, ``alpha ~ Exponential(1)``, ``beta ~ Gamma(0.1, 1)``.
* ``rats``: hierarchical binomial; tumors in 71 groups of rats (Tarone 1982; Gelman et al.,
  BDA3 Section 5.3): ``theta_j ~ Beta(phi kappa, (1 - phi) kappa)``, ``phi ~ Uniform(0, 1)``,
  and BDA3's ``p(alpha, beta) ~ (alpha + beta)^(-5/2)`` as ``kappa ~ Pareto(1, 1.5)`` (a
  Pareto tail).
* ``newcomb``: Newcomb's 66 measurements of the speed of light (BDA3 Section 3.2), normal with
  a flat-ish location and the scale's textbook prior ``sigma ~ Uniform(0, 100)``.
* ``darwin``: Darwin's 15 paired height differences of cross- and self-fertilized Zea mays
  (Fisher 1935), with a one-sided prior on the mean difference, ``mu ~
  TruncatedNormal(0, 50, low=0)`` (a truncated normal), ``sigma ~ HalfNormal(50)``.
* ``poll``: the 1988 pre-election poll of BDA3 Section 3.4 (727 Bush, 583 Dukakis, 137 other),
  multinomial with Dirichlet(1, 1, 1) weights.
* ``eight_schools``: Rubin (1981), BDA3 Section 5.5, centered as NumPyro's documentation writes
  it: ``theta_j ~ Normal(mu, tau)``, ``mu ~ Normal(0, 5)``, ``tau ~ HalfCauchy(5)``.
* ``clotting``: gamma regression; blood clotting times against plasma concentration, lot 1
  (McCullagh & Nelder 1989, Section 8.4.2): ``y_i ~ Gamma(shape, shape / mu_i)``, ``log mu_i =
  b0 + b1 log u_i``.
* ``bioassay``: logistic dose-response of BDA3 Section 3.7 (4 doses, 5 animals each).
"""

import numpy as np

__all__ = ["ZOO", "FUNNEL_SCALES", "elbo_estimate", "grepvi_param_map"]

# Sites whose mean-field posterior is known to miss NUTS's: the scale of a centered
# hierarchical model (the funnel). A mean-field q cannot follow the funnel's dependence
# between tau and the theta_j; every mean-field method (AutoNormal too) shrinks tau.
FUNNEL_SCALES = {"eight_schools": ("tau",)}


def pumps_model(failures, times):
    import numpyro
    import numpyro.distributions as dist

    alpha = numpyro.sample("alpha", dist.Exponential(1.0))
    beta = numpyro.sample("beta", dist.Gamma(0.1, 1.0))
    with numpyro.plate("pump", failures.shape[0]):
        theta = numpyro.sample("theta", dist.Gamma(alpha, beta))
        numpyro.sample("x", dist.Poisson(theta * times), obs=failures)


def rats_model(tumors, group_sizes):
    import numpyro
    import numpyro.distributions as dist

    phi = numpyro.sample("phi", dist.Uniform(0.0, 1.0))
    kappa = numpyro.sample("kappa", dist.Pareto(1.0, 1.5))
    with numpyro.plate("group", tumors.shape[0]):
        theta = numpyro.sample("theta", dist.Beta(phi * kappa, (1.0 - phi) * kappa))
        numpyro.sample("y", dist.Binomial(group_sizes, probs=theta), obs=tumors)


def weibull_model(x, t):
    """Weibull survival regression, ``t ~ Weibull(exp(b0 + x b), k)`` (not in :data:`ZOO`: its
    data is simulated, ``benchmarks/textbook_models.py``). ``(t / lambda)^k`` overflows float32
    at the first draws of ``b`` (``tests/test_widened_gradient.py``)."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    k = numpyro.sample("k", dist.Gamma(2.0, 1.0))
    b0 = numpyro.sample("b0", dist.Normal(0.0, 3.0))
    with numpyro.plate("feature", x.shape[1]):
        b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    with numpyro.plate("row", x.shape[0]):
        numpyro.sample("t", dist.Weibull(jnp.exp(b0 + x @ b), k), obs=t)


def newcomb_model(measurements):
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.Normal(0.0, 100.0))
    sigma = numpyro.sample("sigma", dist.Uniform(0.0, 100.0))
    with numpyro.plate("n", measurements.shape[0]):
        numpyro.sample("y", dist.Normal(mu, sigma), obs=measurements)


def darwin_model(differences):
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.TruncatedNormal(0.0, 50.0, low=0.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(50.0))
    with numpyro.plate("pair", differences.shape[0]):
        numpyro.sample("d", dist.Normal(mu, sigma), obs=differences)


def poll_model(counts, total_count):
    import numpyro
    import numpyro.distributions as dist

    weights = numpyro.sample("weights", dist.Dirichlet(np.ones(3, np.float32)))
    numpyro.sample("y", dist.Multinomial(total_count=total_count, probs=weights), obs=counts)


def eight_schools_model(effects, standard_errors):
    import numpyro
    import numpyro.distributions as dist

    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("school", effects.shape[0]):
        theta = numpyro.sample("theta", dist.Normal(mu, tau))
        numpyro.sample("y", dist.Normal(theta, standard_errors), obs=effects)


def clotting_model(log_concentration, times):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    b0 = numpyro.sample("b0", dist.Normal(0.0, 10.0))
    b1 = numpyro.sample("b1", dist.Normal(0.0, 10.0))
    shape = numpyro.sample("shape", dist.Gamma(1.0, 0.01))
    mean = jnp.exp(b0 + b1 * log_concentration)
    with numpyro.plate("n", times.shape[0]):
        numpyro.sample("y", dist.Gamma(shape, shape / mean), obs=times)


def bioassay_model(doses, deaths, animals):
    import numpyro
    import numpyro.distributions as dist

    a = numpyro.sample("a", dist.Normal(0.0, 10.0))
    b = numpyro.sample("b", dist.Normal(0.0, 10.0))
    with numpyro.plate("dose", doses.shape[0]):
        numpyro.sample("y", dist.Binomial(animals, logits=a + b * doses), obs=deaths)


_F = np.float32
# BDA3's rats.asc, as (tumors, rats) per experiment: 70 historical ones and the current 4 / 14.
# Checked element by element against two public copies of the table, which agree: the BDA
# course demos of A. Vehtari (a BDA3 author), github.com/avehtari/BDA_py_demos,
# demos_ch5/demo5_1.py ("rat data (BDA3, p. 102)"), and PyMC's rat tumour example,
# github.com/pymc-devs/pymc-examples, examples/generalized_linear_models/
# GLM-hierarchical-binomial-model.myst.md: 71 experiments, 267 tumours in 1,739 rats.
RATS = (
    [(0, 20)] * 7 + [(0, 19)] * 4 + [(0, 18)] * 2 + [(0, 17)] + [(1, 20)] * 4 + [(1, 19)] * 2 + [(1, 18)] * 2
)
RATS += [(2, 25), (2, 24), (2, 23)] + [(2, 20)] * 6
RATS += [(1, 10), (5, 49), (2, 19), (5, 46), (3, 27), (2, 17), (7, 49), (7, 47), (3, 20), (3, 20), (2, 13)]
RATS += (
    [(9, 48), (10, 50)] + [(4, 20)] * 7 + [(10, 48), (4, 19), (4, 19), (4, 19), (5, 22), (11, 46), (12, 49)]
)
RATS += [(5, 20), (5, 20), (6, 23), (5, 19), (6, 22), (6, 20), (6, 20), (6, 20), (16, 52), (15, 46), (15, 47)]
RATS += [(9, 24), (4, 14)]
RATS_TUMORS = [y for y, _ in RATS]
RATS_SIZES = [n for _, n in RATS]
NEWCOMB = [28, 26, 33, 24, 34, -44, 27, 16, 40, -2, 29, 22, 24, 21, 25, 30, 23, 29, 31, 19, 24, 20, 36, 32]
NEWCOMB += [36, 28, 25, 21, 28, 29, 37, 25, 28, 26, 30, 32, 36, 26, 30, 22, 36, 23, 27, 27, 28, 27, 31, 27]
NEWCOMB += [26, 33, 26, 32, 32, 24, 39, 28, 24, 25, 32, 25, 29, 27, 28, 29, 16, 23]
CLOTTING_U = [5, 10, 15, 20, 30, 40, 60, 80, 100]
CLOTTING_LOT1 = [118, 58, 42, 35, 27, 25, 21, 19, 18]

ZOO = {
    "pumps": (
        pumps_model,
        (
            np.asarray([5, 1, 5, 14, 3, 19, 1, 1, 4, 22], _F),
            np.asarray([94.3, 15.7, 62.9, 126.0, 5.24, 31.4, 1.05, 1.05, 2.1, 10.5], _F),
        ),
    ),
    "rats": (rats_model, (np.asarray(RATS_TUMORS, _F), np.asarray(RATS_SIZES, _F))),
    "newcomb": (newcomb_model, (np.asarray(NEWCOMB, _F),)),
    "darwin": (darwin_model, (np.asarray([49, -67, 8, 16, 6, 23, 28, 41, 14, 29, 56, 24, 75, 60, -48], _F),)),
    "poll": (poll_model, (np.asarray([727, 583, 137], _F), 1447)),
    "eight_schools": (
        eight_schools_model,
        (np.asarray([28, 8, -3, 7, -1, 1, 18, 12], _F), np.asarray([15, 10, 16, 11, 9, 11, 10, 18], _F)),
    ),
    "clotting": (clotting_model, (np.log(np.asarray(CLOTTING_U, _F)), np.asarray(CLOTTING_LOT1, _F))),
    "bioassay": (
        bioassay_model,
        (
            np.asarray([-0.86, -0.3, -0.05, 0.73], _F),
            np.asarray([0, 1, 3, 5], _F),
            np.asarray([5, 5, 5, 5], _F),
        ),
    ),
}
assert len(RATS_TUMORS) == len(RATS_SIZES) == 71 and len(NEWCOMB) == 66


def elbo_estimate(model, guide, param_map, data, num_particles: int = 20_000, seed: int = 0):
    """``(ELBO, standard error)`` of a NumPyro guide at ``param_map``: the mean of
    ``num_particles`` one-draw ``Trace_ELBO`` values ``log p(x, z) - log q(z)`` (the same
    estimator for every guide: grepvi's through :class:`grepvi.interop.numpyro_svi.GrepGuide`)."""
    import jax
    from numpyro.infer import Trace_ELBO

    def one(key):
        return -Trace_ELBO().loss(key, param_map, model, guide, *data)

    values = np.asarray(jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(seed), num_particles)))
    values = values[np.isfinite(values)] if np.all(np.isfinite(values)) else values
    return float(np.mean(values)), float(np.std(values) / np.sqrt(values.size))


def grepvi_param_map(params: dict) -> dict:
    """A grepvi fit's ``params`` as :class:`~grepvi.interop.numpyro_svi.GrepGuide`'s NumPyro params."""
    from grepvi.interop.numpyro_svi import SEPARATOR

    return {f"{site}{SEPARATOR}{name}": value for site, p in params.items() for name, value in p.items()}
