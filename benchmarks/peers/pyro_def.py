"""The sparse gamma DEF in Pyro: ``Trace_ELBO`` with a mean-field gamma guide.

Same model as :func:`grepvi.models.sparse_gamma_def` (shape/rate gamma densities, rates and
prior means clamped to the smallest normal float32) and the same guide parameterization as
grepvi's :class:`~grepvi.Gamma` family (unconstrained shape and mean through softplus). The
guide's gamma draws use PyTorch's pathwise gradients (``torch._standard_gamma_grad``), the
reparameterization gradient Pyro uses for ``Gamma.rsample``.
"""

import numpy as np

__all__ = ["make_step"]


def make_step(data, layer_sizes=(100, 40, 15), seed=0, alpha_z=0.1, learning_rate=0.01):
    import pyro
    import pyro.distributions as dist
    import torch
    from torch.nn.functional import softplus

    pyro.set_rng_seed(seed)
    pyro.clear_param_store()
    x = torch.as_tensor(np.asarray(data, np.float32))
    num_observations, num_dimensions = x.shape
    tiny = torch.finfo(torch.float32).tiny
    shapes = {
        f"W{l}": (k, num_dimensions if l == 0 else layer_sizes[l - 1]) for l, k in enumerate(layer_sizes)
    }
    shapes.update({f"z{l + 1}": (num_observations, k) for l, k in enumerate(layer_sizes)})
    num_layers = len(layer_sizes)

    def model():
        w = {
            name: pyro.sample(name, dist.Gamma(0.1, 0.3).expand(shapes[name]).to_event(2))
            for name in sorted(shapes)
            if name.startswith("W")
        }
        top = f"z{num_layers}"
        z = {top: pyro.sample(top, dist.Gamma(0.1, 0.1).expand(shapes[top]).to_event(2))}
        for l in range(num_layers - 1, 0, -1):
            mean = (z[f"z{l + 1}"] @ w[f"W{l}"]).clamp_min(tiny)
            z[f"z{l}"] = pyro.sample(f"z{l}", dist.Gamma(alpha_z, alpha_z / mean).to_event(2))
        rate = (z["z1"] @ w["W0"]).clamp_min(tiny)
        pyro.sample("x", dist.Poisson(rate).to_event(2), obs=x)

    generator = torch.Generator().manual_seed(seed)

    def init(shape, value):
        noise = 0.1 * torch.randn(shape, generator=generator)
        return torch.full(shape, value) + noise

    def guide():
        for name, shape in sorted(shapes.items()):
            concentration = softplus(pyro.param(f"{name}_concentration", lambda s=shape: init(s, 0.5)))
            mean = softplus(pyro.param(f"{name}_mean", lambda s=shape: init(s, 0.0)))
            pyro.sample(name, dist.Gamma(concentration, concentration / mean).to_event(2))

    svi = pyro.infer.SVI(model, guide, pyro.optim.Adam({"lr": learning_rate}), pyro.infer.Trace_ELBO())

    def step():
        return svi.step()

    return step
