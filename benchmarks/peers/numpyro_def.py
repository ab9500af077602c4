"""The sparse gamma DEF in NumPyro: ``Trace_ELBO`` with a mean-field gamma guide.

Same model and guide parameterization as :mod:`benchmarks.peers.pyro_def`. NumPyro's
``Gamma`` samples with :func:`jax.random.gamma`, whose gradient with respect to the shape is
the implicit reparameterization gradient (Figurnov et al. 2018). The update is jitted.
"""

import numpy as np

__all__ = ["make_step"]


def make_step(data, layer_sizes=(100, 40, 15), seed=0, alpha_z=0.1, learning_rate=0.01):
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax.nn import softplus

    x = jnp.asarray(np.asarray(data, np.float32))
    num_observations, num_dimensions = x.shape
    tiny = jnp.finfo(jnp.float32).tiny
    shapes = {
        f"W{l}": (k, num_dimensions if l == 0 else layer_sizes[l - 1]) for l, k in enumerate(layer_sizes)
    }
    shapes.update({f"z{l + 1}": (num_observations, k) for l, k in enumerate(layer_sizes)})
    num_layers = len(layer_sizes)

    def model():
        w = {
            name: numpyro.sample(name, dist.Gamma(0.1, 0.3).expand(shapes[name]).to_event(2))
            for name in sorted(shapes)
            if name.startswith("W")
        }
        top = f"z{num_layers}"
        z = {top: numpyro.sample(top, dist.Gamma(0.1, 0.1).expand(shapes[top]).to_event(2))}
        for l in range(num_layers - 1, 0, -1):
            mean = jnp.maximum(z[f"z{l + 1}"] @ w[f"W{l}"], tiny)
            z[f"z{l}"] = numpyro.sample(f"z{l}", dist.Gamma(alpha_z, alpha_z / mean).to_event(2))
        rate = jnp.maximum(z["z1"] @ w["W0"], tiny)
        numpyro.sample("x", dist.Poisson(rate).to_event(2), obs=x)

    keys = dict(zip(sorted(shapes), jax.random.split(jax.random.key(seed + 1), len(shapes)), strict=True))

    def guide():
        for name, shape in sorted(shapes.items()):
            key_a, key_m = jax.random.split(keys[name])
            concentration = softplus(
                numpyro.param(f"{name}_concentration", 0.5 + 0.1 * jax.random.normal(key_a, shape))
            )
            mean = softplus(numpyro.param(f"{name}_mean", 0.1 * jax.random.normal(key_m, shape)))
            numpyro.sample(name, dist.Gamma(concentration, concentration / mean).to_event(2))

    svi = numpyro.infer.SVI(model, guide, numpyro.optim.Adam(learning_rate), numpyro.infer.Trace_ELBO())
    holder = [svi.init(jax.random.key(seed))]
    update = jax.jit(svi.update)

    def step():
        holder[0], loss = update(holder[0])
        return jax.block_until_ready(loss)

    return step
