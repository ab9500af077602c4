"""The beta-gamma matrix factorization for binary data, paper Section 5.

With observations ``n = 1..N``, dimensions ``d = 1..D`` and ``K`` factors::

    z_nk ~ Uniform(0, 1)
    w_kd ~ Gamma(weight_shape, weight_rate)                  (shape/rate; paper: 0.1, 0.3)
    x_nd ~ Bernoulli(sigmoid(l_nd)),   l_nd = sum_k logit(z_nk) w_kd

The paper uses ``K = 100`` (binarized MNIST: 5000 x 784; Omniglot: 4425 x 11025).

Latents and axes: ``z: ("n", "k")`` (local), ``w: ("k", "d")`` (global); data ``x: ("n",
"d")`` (an argument of every program, see :mod:`grepvi.models.model`). Factors:
``likelihood`` over ``("n", "d")`` and ``w_prior`` over ``("k", "d")``; the uniform prior of
``z`` is ``log 1 = 0`` and has no factor.

Numerics: the factors take the latents in log space (``Model.log_space``): ``logit z``, which
the beta family draws as ``log g1 - log g2`` of two gamma variates, so no ``z`` is rounded to
0 or 1 on its way (a beta draw within ``1e-9`` of 1 has a logit of 21, not the 15.9 of the
clamped float32 ``z``), and ``log w``. ``log Bernoulli(x; sigmoid(l)) = -softplus((1 - 2x)
l)``, which is ``x l - softplus(l)`` without its cancellation for large ``|l|``.
``model.logdensity_fn`` and the other value-space functions take ``z`` and convert.

Default variational families (``Model.latents()``): ``z`` a beta with both shapes ``1``
(uniform, the prior) jittered by 10%; ``w`` a gamma of shape ``softplus(0.5) ~ 0.97`` (as for
the sparse gamma DEF, after the authors' code) and mean ``1 / sqrt(2 K pi^2 / 3)``, so that at
initialization each logit ``l_nd`` has standard deviation about 1 under ``q`` (``Var logit z
= pi^2 / 3`` for a uniform ``z``, ``E[w^2] ~ 2 mean^2``): predictions start uncertain instead
of saturated at 0 or 1, where the Bernoulli log-likelihood of a sum of 100 terms would be of
order -10 per entry.
"""

import jax
import jax.numpy as jnp
import numpy as np

from grepvi import numerics
from grepvi.data.observations import observation_matrix
from grepvi.errors import ConfigError
from grepvi.families import Beta, Gamma
from grepvi.inference.compilation_cache import jit_for_compile_time
from grepvi.models.factors import Factor, gamma_log_density_log_space, log_joint
from grepvi.models.model import Model, value_space_functions
from grepvi.models.sparse_gamma_def import INIT_CONCENTRATION, INIT_NOISE
from grepvi.validation import positive_float

__all__ = ["beta_gamma_mf", "bernoulli_log_likelihood", "logit"]


def logit(z):
    """``log z - log1p(-z)``."""
    return jnp.log(z) - jnp.log1p(-z)


def bernoulli_log_likelihood(x, logits):
    """``log Bernoulli(x; sigmoid(logits))`` per entry, ``x`` in {0, 1}."""
    return -numerics.softplus((1.0 - 2.0 * x) * logits)


def beta_gamma_mf(data, num_factors: int = 100, weight_shape: float = 0.1, weight_rate: float = 0.3) -> Model:
    """The beta-gamma MF bound to binary data (see the module docstring for the model).

    Args:
      data: ``(N, D)`` array of zeros and ones (stored as float32).
      num_factors: ``K``.
      weight_shape, weight_rate: gamma prior of the weights.

    Returns:
      A :class:`~grepvi.models.Model` with latents ``z`` (local, ``(N, K)``) and ``w``
      (global, ``(K, D)``).

    Raises:
      DataError: ``data`` not a finite 2-D array of zeros and ones.
      ConfigError: ``num_factors`` not a positive integer, or a hyperparameter not positive.

    Example:
        >>> import numpy as np
        >>> from grepvi.models import beta_gamma_mf
        >>> model = beta_gamma_mf(np.eye(4), num_factors=2)
        >>> model.latent_shapes
        {'w': (2, 4), 'z': (4, 2)}
    """
    x = observation_matrix(data, "bernoulli", "data")
    data = prepare_data(x)
    if isinstance(num_factors, bool) or not isinstance(num_factors, int | np.integer) or num_factors < 1:
        raise ConfigError(f"num_factors: expected a positive integer, found {num_factors!r}")
    hyperparameters = {
        "num_factors": int(num_factors),
        "weight_shape": positive_float(weight_shape, "weight_shape"),
        "weight_rate": positive_float(weight_rate, "weight_rate"),
    }
    num_observations, num_dimensions = x.shape
    k = hyperparameters["num_factors"]
    latent_axes = {"z": ("n", "k"), "w": ("k", "d")}
    axis_sizes = {"n": num_observations, "d": num_dimensions, "k": k}

    # The latents arrive as logit z and log w (log_space=True).
    def logits(log_latents):
        return log_latents["z"] @ numerics.exp_linear_tail(log_latents["w"])

    def likelihood(log_latents, data):
        return bernoulli_log_likelihood(data["x"], logits(log_latents))

    def w_prior(log_latents, data):
        return gamma_log_density_log_space(
            log_latents["w"], hyperparameters["weight_shape"], hyperparameters["weight_rate"]
        )

    joint = log_joint(
        [Factor("likelihood", ("n", "d"), likelihood), Factor("w_prior", ("k", "d"), w_prior)],
        latent_axes,
        axis_sizes,
        data_axes={"x": ("n", "d")},
    )
    init_w_mean = float(1.0 / np.sqrt(2.0 * k * np.pi**2 / 3.0))

    def latents():
        return {
            "z": Beta(
                shape=joint.latent_shape("z"),
                init_concentration1=1.0,
                init_concentration0=1.0,
                init_noise=INIT_NOISE,
            ),
            "w": Gamma(
                shape=joint.latent_shape("w"),
                init_concentration=INIT_CONCENTRATION,
                init_mean=init_w_mean,
                init_noise=INIT_NOISE,
            ),
        }

    def log_space_observation_loglik(log_latents, observed):
        return bernoulli_log_likelihood(observed["x"], logits(log_latents))

    def log_space_mean_observation(log_latents):
        return jax.nn.sigmoid(logits(log_latents))

    values = value_space_functions(
        joint,
        {"z": "unit_interval", "w": "positive"},
        log_space_observation_loglik,
        log_space_mean_observation,
    )

    def sample(rng_key, num_observations=None):
        n = num_observations if num_observations is not None else num_observations_default
        return _simulate_program(rng_key, int(n), num_dimensions, tuple(sorted(hyperparameters.items())))

    num_observations_default = num_observations

    def with_data(new_data):
        return beta_gamma_mf(new_data, **hyperparameters)

    return Model(
        name="beta_gamma_mf",
        data=data,
        joint=joint,
        logdensity_fn=values.logdensity_fn,
        local_logdensity_fn=values.local_logdensity_fn,
        logdensity_and_local_fn=values.logdensity_and_local_fn,
        latents=latents,
        local_latent_names=("z",),
        global_latent_names=("w",),
        observation_loglik=values.observation_loglik,
        mean_observation=values.mean_observation,
        sample=sample,
        prepare_data=prepare_data,
        with_data=with_data,
        hyperparameters=hyperparameters,
        log_space=True,
        log_space_observation_loglik=log_space_observation_loglik,
    )


def prepare_data(x) -> dict:
    """The data pytree of the beta-gamma MF: the validated binary observations."""
    return {"x": observation_matrix(x, "bernoulli", "x")}


def _simulate(rng_key, num_observations, num_dimensions, hyperparameters):
    """Draws ``(binary data, latents)``; ``z`` uniform inside ``(0, 1)``, ``w`` in log space."""
    hyper = dict(hyperparameters)
    k = hyper["num_factors"]
    key_z, key_w, key_x = jax.random.split(rng_key, 3)
    finfo = jnp.finfo(jnp.float32)
    z = jnp.clip(
        jax.random.uniform(key_z, (num_observations, k), jnp.float32), finfo.tiny, 1.0 - finfo.epsneg
    )
    log_w = jax.random.loggamma(key_w, jnp.full((k, num_dimensions), hyper["weight_shape"], jnp.float32))
    w = numerics.safe_exp(log_w - np.log(hyper["weight_rate"]))
    probability = jax.nn.sigmoid(logit(z) @ w)
    observed = jax.random.bernoulli(key_x, probability).astype(jnp.float32)
    return observed, {"z": z, "w": w}


# run once per data set: compiled for compile time, static in the sizes and hyperparameters
_simulate_program = jit_for_compile_time(_simulate, static_argnums=(1, 2, 3))
