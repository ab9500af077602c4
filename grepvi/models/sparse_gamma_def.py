"""The sparse gamma deep exponential family (Ranganath et al. 2015), paper Section 5.

With layers ``l = 1..L`` of sizes ``K_1..K_L``, observations ``n = 1..N`` and dimensions
``d = 1..D`` (gamma densities in shape/rate)::

    z^(L)_nk   ~ Gamma(top_shape, top_rate)
    z^(l)_nk   ~ Gamma(alpha_z, alpha_z / (z^(l+1)_n W^(l))_k)        l = 1..L-1
    W^(l)_kk'  ~ Gamma(weight_shape, weight_rate)                     W^(0): K_1 x D,
                                                                      W^(l): K_{l+1} x K_l
    x_nd       ~ Poisson((z^(1)_n W^(0))_d)

so ``E[z^(l)_n | z^(l+1)_n] = z^(l+1)_n W^(l)``. The paper uses ``alpha_z = 0.1``, weights
``Gamma(0.1, 0.3)``, a ``Gamma(0.1, 0.1)`` top layer and ``L = 3`` layers of 100, 40 and 15
units (Olivetti faces: ``N = 320``, ``D = 4096``, 463,800 latent variables).

Latents and their axes (the factors' named axes give the Markov blankets, see
:mod:`grepvi.models.factors`)::

    z1: ("n", "k1")   z2: ("n", "k2") ...   W0: ("k1", "d")   W1: ("k2", "k1") ...

Data (an argument of every program, see :mod:`grepvi.models.model`): ``x: ("n", "d")`` the
counts and ``log_factorial: ("n", "d")`` their ``log x!``.

Factors: ``likelihood`` over ``("n", "d")``; ``z{l}_prior`` over ``("n", "k{l}")``;
``W{l}_prior`` over the axes of ``W{l}``. The log joint is the true one: the Poisson term keeps
``-log x!`` (a constant; it also centres the local log joints of ``z1`` and ``W0`` near zero,
which lowers the variance of G-REP's correction term).

Numerics: the factors take every latent in log space (``Model.log_space``; the gamma families
draw there): ``log z`` and ``log W``, never ``z`` rounded to 0. The Poisson rate and the prior
means are computed as ``log(z W) = log_matmul_exp(log z, log W)`` (:func:`grepvi.numerics.
log_matmul_exp`), so that a mean of ``1e-60`` stays ``1e-60`` and the prior's ``alpha z / m``
is ``alpha exp(log z - log m)``, whose derivative is finite where ``alpha z / m^2`` overflowed
float32 (Olivetti at the paper's eta = 5 skipped 1.5% of its steps for that reason).
``model.logdensity_fn`` and the other value-space functions take ``z`` and convert.

Default variational families (``Model.latents()``) follow the authors' code
(blei-lab/ars-reparameterization, ``sparse gamma def/run_gamma.py``): every latent a gamma
with unconstrained shape ``0.5`` and mean ``0`` plus ``0.1`` noise, i.e. shape ``softplus(0.5)
~ 0.97`` and mean ``log 2 ~ 0.69``, jittered by about 10% (here: a relative log-normal
jitter of 0.1) to break the symmetry between factors.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from grepvi import numerics
from grepvi.data.observations import observation_matrix
from grepvi.errors import ConfigError
from grepvi.families import Gamma
from grepvi.inference.compilation_cache import jit_for_compile_time
from grepvi.models.factors import Factor, gamma_log_density_log_space, log_joint
from grepvi.models.model import Model, value_space_functions
from grepvi.validation import positive_float

__all__ = ["sparse_gamma_def", "poisson_log_likelihood", "MAX_SAMPLED_RATE"]

# softplus(0.5) in float32, in NumPy: jax.nn.softplus here compiled a program at import (0.03 s)
INIT_CONCENTRATION = float(np.float32(0.5) + np.log1p(np.exp(np.float32(-0.5))))
INIT_MEAN = float(np.log(2.0))
INIT_NOISE = 0.1
MAX_SAMPLED_RATE = float(2**24)  # counts above this are not exact in float32


def poisson_log_likelihood(x, rate, log_factorial=None):
    """``log Poisson(x; rate)`` per entry, rate clamped to the smallest normal float."""
    rate = jnp.maximum(rate, jnp.finfo(jnp.result_type(rate)).tiny)
    log_factorial = gammaln(x + 1.0) if log_factorial is None else log_factorial
    return x * jnp.log(rate) - rate - log_factorial


def poisson_log_likelihood_log_rate(x, log_rate, log_factorial=None):
    """``log Poisson(x; exp(log_rate))`` per entry: ``x log_rate - exp(log_rate) - log x!``."""
    log_factorial = gammaln(x + 1.0) if log_factorial is None else log_factorial
    return x * log_rate - numerics.exp_linear_tail(log_rate) - log_factorial


def _layer_sizes(layer_sizes):
    if isinstance(layer_sizes, int | np.integer):
        layer_sizes = (layer_sizes,)
    try:
        sizes = tuple(layer_sizes)
    except TypeError as error:
        raise ConfigError(
            f"layer_sizes: expected a tuple of positive integers, found {layer_sizes!r}"
        ) from error
    if not sizes or any(isinstance(s, bool) or int(s) != s or int(s) < 1 for s in sizes):
        raise ConfigError(
            f"layer_sizes: expected a non-empty tuple of positive integers, found {layer_sizes!r}"
        )
    return tuple(int(s) for s in sizes)


def sparse_gamma_def(
    data,
    layer_sizes=(100, 40, 15),
    alpha_z: float = 0.1,
    weight_shape: float = 0.1,
    weight_rate: float = 0.3,
    top_shape: float = 0.1,
    top_rate: float = 0.1,
) -> Model:
    """The sparse gamma DEF bound to count data (see the module docstring for the model).

    Args:
      data: ``(N, D)`` non-negative integer counts (stored as float32).
      layer_sizes: ``(K_1, ..., K_L)``, bottom layer first.
      alpha_z: shape of the gamma of the lower layers' ``z``.
      weight_shape, weight_rate: gamma prior of every weight.
      top_shape, top_rate: gamma prior of the top layer ``z^(L)``.

    Returns:
      A :class:`~grepvi.models.Model` with latents ``z1..zL`` (local) and ``W0..W{L-1}``
      (global).

    Raises:
      DataError: ``data`` not a finite 2-D array of non-negative integers.
      ConfigError: a hyperparameter that is not positive.

    Example:
        >>> import numpy as np, grepvi
        >>> from grepvi.models import sparse_gamma_def
        >>> model = sparse_gamma_def(np.ones((6, 5)), layer_sizes=(3, 2))
        >>> sorted(model.latent_shapes.items())
        [('W0', (3, 5)), ('W1', (2, 3)), ('z1', (6, 3)), ('z2', (6, 2))]
        >>> model.local_latent_names, model.global_latent_names
        (('z1', 'z2'), ('W0', 'W1'))
    """
    x = observation_matrix(data, "poisson", "data")
    data = prepare_data(x)
    sizes_k = _layer_sizes(layer_sizes)
    hyperparameters = {
        "layer_sizes": sizes_k,
        "alpha_z": positive_float(alpha_z, "alpha_z"),
        "weight_shape": positive_float(weight_shape, "weight_shape"),
        "weight_rate": positive_float(weight_rate, "weight_rate"),
        "top_shape": positive_float(top_shape, "top_shape"),
        "top_rate": positive_float(top_rate, "top_rate"),
    }
    alpha = hyperparameters["alpha_z"]
    num_layers = len(sizes_k)
    num_observations, num_dimensions = x.shape

    z_names = [f"z{l}" for l in range(1, num_layers + 1)]
    w_names = [f"W{l}" for l in range(num_layers)]
    axis_sizes = {"n": num_observations, "d": num_dimensions}
    axis_sizes.update({f"k{l}": size for l, size in enumerate(sizes_k, start=1)})
    latent_axes = {f"z{l}": ("n", f"k{l}") for l in range(1, num_layers + 1)}
    latent_axes["W0"] = ("k1", "d")
    latent_axes.update({f"W{l}": (f"k{l + 1}", f"k{l}") for l in range(1, num_layers)})

    # Every latent arrives as its logarithm (log_space=True).
    def log_rate(log_latents):
        return numerics.log_matmul_exp(log_latents["z1"], log_latents["W0"])

    def likelihood(log_latents, data):
        return poisson_log_likelihood_log_rate(data["x"], log_rate(log_latents), data["log_factorial"])

    def layer_prior(l):
        def factor(log_latents, data):
            log_z = log_latents[f"z{l}"]
            log_mean = numerics.log_matmul_exp(log_latents[f"z{l + 1}"], log_latents[f"W{l}"])
            # Gamma(alpha, alpha / mean): alpha log(alpha / mean) - lgamma(alpha)
            #                             + (alpha - 1) log z - alpha z / mean
            return (
                alpha * (np.log(alpha) - log_mean)
                - gammaln(alpha)
                + (alpha - 1.0) * log_z
                - alpha * numerics.exp_linear_tail(log_z - log_mean)
            )

        return factor

    def top_prior(log_latents, data):
        return gamma_log_density_log_space(
            log_latents[f"z{num_layers}"], hyperparameters["top_shape"], hyperparameters["top_rate"]
        )

    def weight_prior(name):
        return lambda log_latents, data: gamma_log_density_log_space(
            log_latents[name], hyperparameters["weight_shape"], hyperparameters["weight_rate"]
        )

    factors = [Factor("likelihood", ("n", "d"), likelihood)]
    factors += [Factor(f"z{l}_prior", latent_axes[f"z{l}"], layer_prior(l)) for l in range(1, num_layers)]
    factors.append(Factor(f"z{num_layers}_prior", latent_axes[f"z{num_layers}"], top_prior))
    factors += [Factor(f"{name}_prior", latent_axes[name], weight_prior(name)) for name in w_names]
    data_axes = {"x": ("n", "d"), "log_factorial": ("n", "d")}
    joint = log_joint(factors, latent_axes, axis_sizes, data_axes=data_axes)

    def latents():
        return {
            name: Gamma(
                shape=joint.latent_shape(name),
                init_concentration=INIT_CONCENTRATION,
                init_mean=INIT_MEAN,
                init_noise=INIT_NOISE,
            )
            for name in joint.latent_axes
        }

    def log_space_observation_loglik(log_latents, observed):
        return poisson_log_likelihood_log_rate(
            observed["x"], log_rate(log_latents), observed["log_factorial"]
        )

    def log_space_mean_observation(log_latents):
        return jnp.exp(log_rate(log_latents))  # evaluation only: no gradient

    values = value_space_functions(
        joint,
        {name: "positive" for name in latent_axes},
        log_space_observation_loglik,
        log_space_mean_observation,
    )

    def sample(rng_key, num_observations=None):
        n = num_observations if num_observations is not None else num_observations_default
        return _simulate_program(rng_key, int(n), num_dimensions, tuple(sorted(hyperparameters.items())))

    num_observations_default = num_observations

    def with_data(new_data):
        return sparse_gamma_def(new_data, **hyperparameters)

    return Model(
        name="sparse_gamma_def",
        data=data,
        joint=joint,
        logdensity_fn=values.logdensity_fn,
        local_logdensity_fn=values.local_logdensity_fn,
        logdensity_and_local_fn=values.logdensity_and_local_fn,
        latents=latents,
        local_latent_names=tuple(z_names),
        global_latent_names=tuple(w_names),
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
    """The data pytree of the sparse gamma DEF: validated counts and their ``log x!``."""
    x = observation_matrix(x, "poisson", "x")
    return {"x": x, "log_factorial": _log_factorial(x)}


@jax.jit
def _log_factorial(x):
    return gammaln(x + 1.0)


def _simulate(rng_key, num_observations, num_dimensions, hyperparameters):
    """Draws ``(counts, latents)`` from the generative process, top layer first.

    All gamma variates come from one ``jax.random.loggamma`` call on a flat vector of shapes
    (one compiled rejection loop instead of one per latent), in log space: ``log z = log g -
    log rate`` with ``g ~ Gamma(shape, 1)``. Shared by every model with the same sizes and
    hyperparameters (a module-level jit, static in them).
    """
    hyper = dict(hyperparameters)
    sizes_k = hyper["layer_sizes"]
    num_layers = len(sizes_k)
    alpha = hyper["alpha_z"]
    shapes, concentrations = {}, {}
    for l in range(num_layers):
        shapes[f"W{l}"] = (sizes_k[0], num_dimensions) if l == 0 else (sizes_k[l], sizes_k[l - 1])
        concentrations[f"W{l}"] = hyper["weight_shape"]
    for l, size in enumerate(sizes_k, start=1):
        shapes[f"z{l}"] = (num_observations, size)
        concentrations[f"z{l}"] = hyper["top_shape"] if l == num_layers else alpha
    key_gamma, key_poisson = jax.random.split(rng_key)
    flat = jnp.concatenate(
        [jnp.full((int(np.prod(shapes[name])),), concentrations[name], jnp.float32) for name in shapes]
    )
    log_standard = jax.random.loggamma(key_gamma, flat)
    pieces, start = {}, 0
    for name, shape in shapes.items():
        size = int(np.prod(shape))
        pieces[name] = log_standard[start : start + size].reshape(shape)
        start += size
    values = {}
    for l in range(num_layers):
        values[f"W{l}"] = numerics.safe_exp(pieces[f"W{l}"] - np.log(hyper["weight_rate"]))
    top = f"z{num_layers}"
    values[top] = numerics.safe_exp(pieces[top] - np.log(hyper["top_rate"]))
    for l in range(num_layers - 1, 0, -1):
        mean = values[f"z{l + 1}"] @ values[f"W{l}"]
        log_mean = jnp.log(jnp.maximum(mean, jnp.finfo(mean.dtype).tiny))
        values[f"z{l}"] = numerics.safe_exp(pieces[f"z{l}"] + log_mean - np.log(alpha))
    poisson_rate = jnp.clip(values["z1"] @ values["W0"], 0.0, MAX_SAMPLED_RATE)
    counts = jax.random.poisson(key_poisson, poisson_rate).astype(jnp.float32)
    return counts, values


# run once per data set: compiled for compile time, static in the sizes and hyperparameters
_simulate_program = jit_for_compile_time(_simulate, static_argnums=(1, 2, 3))
