"""The paper's models written as ordinary NumPyro models (for :mod:`grepvi.interop.numpyro_model`).

They are the same models as :func:`grepvi.models.sparse_gamma_def` and
:func:`grepvi.models.beta_gamma_mf` (same densities; plates name the axes, each plate at one
dim as NumPyro's autoguides need), so that
``from_numpyro(sparse_gamma_def_model, x)`` and grepvi's named-axis DEF have the same local
log joints (``tests/test_numpyro_model.py``), and a Poisson factorization of the kind found in
NumPyro's examples (positive latents). NumPyro is an optional extra.
"""

import jax.numpy as jnp

__all__ = ["sparse_gamma_def_model", "beta_gamma_mf_model", "poisson_factorization_model"]


def sparse_gamma_def_model(
    x,
    layer_sizes=(100, 40, 15),
    alpha_z=0.1,
    weight_shape=0.1,
    weight_rate=0.3,
    top_shape=0.1,
    top_rate=0.1,
):
    """Sparse gamma DEF: ``z^(L) ~ Gamma(top)``, ``z^(l) ~ Gamma(alpha, alpha / (z^(l+1) W^(l)))``,
    ``W ~ Gamma(weight)``, ``x ~ Poisson(z^(1) W^(0))`` (plates ``n``, ``d``, ``k1..kL``)."""
    import numpyro
    import numpyro.distributions as dist

    num_observations, num_dimensions = x.shape
    sizes = tuple(layer_sizes)
    num_layers = len(sizes)
    weights = {}
    # Each plate keeps one dim (as NumPyro's autoguides require): the rows of a weight matrix get
    # a plate of their own ("W0_rows"); the axis it stands for is contracted by the matmul, so
    # its name does not change any Markov blanket.
    with numpyro.plate("W0_rows", sizes[0], dim=-2), numpyro.plate("d", num_dimensions, dim=-1):
        weights[0] = numpyro.sample("W0", dist.Gamma(weight_shape, weight_rate))
    for l in range(1, num_layers):
        with numpyro.plate(f"W{l}_rows", sizes[l], dim=-2), numpyro.plate(f"k{l}", sizes[l - 1], dim=-1):
            weights[l] = numpyro.sample(f"W{l}", dist.Gamma(weight_shape, weight_rate))
    with numpyro.plate("n", num_observations, dim=-2):
        with numpyro.plate(f"k{num_layers}", sizes[-1], dim=-1):
            z = numpyro.sample(f"z{num_layers}", dist.Gamma(top_shape, top_rate))
        for l in range(num_layers - 1, 0, -1):
            mean = jnp.maximum(z @ weights[l], jnp.finfo(jnp.float32).tiny)
            with numpyro.plate(f"k{l}", sizes[l - 1], dim=-1):
                z = numpyro.sample(f"z{l}", dist.Gamma(alpha_z, alpha_z / mean))
        rate = jnp.maximum(z @ weights[0], jnp.finfo(jnp.float32).tiny)
        with numpyro.plate("d", num_dimensions, dim=-1):
            numpyro.sample("x", dist.Poisson(rate), obs=x)


def beta_gamma_mf_model(x, num_factors=100, weight_shape=0.1, weight_rate=0.3):
    """Beta-gamma MF: ``z ~ Uniform(0, 1)`` (a Beta(1, 1)), ``w ~ Gamma(weight)``,
    ``x ~ Bernoulli(sigmoid(logit(z) w))`` (plates ``n``, ``k``, ``d``)."""
    import numpyro
    import numpyro.distributions as dist

    num_observations, num_dimensions = x.shape
    with numpyro.plate("w_rows", num_factors, dim=-2), numpyro.plate("d", num_dimensions, dim=-1):
        w = numpyro.sample("w", dist.Gamma(weight_shape, weight_rate))
    with numpyro.plate("n", num_observations, dim=-2):
        with numpyro.plate("k", num_factors, dim=-1):
            z = numpyro.sample("z", dist.Beta(1.0, 1.0))
        logits = (jnp.log(z) - jnp.log1p(-z)) @ w
        with numpyro.plate("d", num_dimensions, dim=-1):
            numpyro.sample("x", dist.Bernoulli(logits=logits), obs=x)


def poisson_factorization_model(counts, num_factors=5, shape=0.3, rate=0.3):
    """Poisson matrix factorization (a gamma-Poisson topic model, as in NumPyro's examples):
    ``theta_nk, beta_kd ~ Gamma(shape, rate)``, ``counts_nd ~ Poisson(theta_n beta_d)``."""
    import numpyro
    import numpyro.distributions as dist

    num_rows, num_columns = counts.shape
    with numpyro.plate("beta_rows", num_factors, dim=-2), numpyro.plate("d", num_columns, dim=-1):
        beta = numpyro.sample("beta", dist.Gamma(shape, rate))
    with numpyro.plate("n", num_rows, dim=-2):
        with numpyro.plate("k", num_factors, dim=-1):
            theta = numpyro.sample("theta", dist.Gamma(shape, rate))
        with numpyro.plate("d", num_columns, dim=-1):
            numpyro.sample("counts", dist.Poisson(theta @ beta), obs=counts)
