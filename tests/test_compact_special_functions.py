"""NumPyro's densities under the adapter's ``compact_special_functions``: the same values and
gradients as with JAX's ``betaln``, from a smaller program, and NumPyro left as it was."""

import jax
import jax.numpy as jnp
import pytest

pytest.importorskip("numpyro")
import numpyro.distributions as dist  # noqa: E402
import numpyro.distributions.conjugate as conjugate  # noqa: E402
from jax.scipy.special import betaln as jax_betaln  # noqa: E402

from grepvi.interop.numpyro_model import compact_special_functions  # noqa: E402

COUNTS = jnp.asarray([0.0, 1.0, 3.0, 17.0, 250.0, 12_000.0], jnp.float32)


def _negative_binomial(concentration):
    return jnp.sum(dist.NegativeBinomial2(jnp.float32(6.5), concentration).log_prob(COUNTS))


def _beta_binomial(a):
    return jnp.sum(
        dist.BetaBinomial(a, jnp.float32(3.0), jnp.float32(40.0)).log_prob(jnp.arange(0.0, 41.0, 5.0))
    )


def _student_t(df):
    return jnp.sum(dist.StudentT(df, 0.5, 2.0).log_prob(jnp.asarray([-30.0, 0.0, 4.0])))


@pytest.mark.parametrize("density", [_negative_binomial, _beta_binomial, _student_t])
@pytest.mark.parametrize("parameter", [0.05, 0.7, 9.0, 300.0, 4e4])
def test_values_and_gradients_are_numpyros(density, parameter):
    """Within float32's own error of NumPyro's density (with JAX's ``betaln``) against float64."""
    x = jnp.float32(parameter)
    with jax.enable_x64(True):
        exact = [float(v) for v in jax.value_and_grad(density)(jnp.float64(parameter))]
    plain = [float(v) for v in jax.value_and_grad(density)(x)]
    with compact_special_functions():
        compact = [float(v) for v in jax.value_and_grad(density)(x)]
    for got, numpyro_own, reference, rtol in zip(compact, plain, exact, (2e-6, 2e-4), strict=True):
        allowed = abs(numpyro_own - reference) + rtol * max(1.0, abs(reference))
        assert abs(got - reference) <= allowed, (got, numpyro_own, reference)


def test_the_program_is_smaller_and_numpyro_is_restored():
    def size():  # lines of the compiled program (XLA expands JAX's special functions there)
        compiled = jax.jit(jax.grad(_negative_binomial)).lower(jnp.float32(2.0)).compile()
        return len(compiled.as_text().splitlines())

    plain = size()
    with compact_special_functions():
        assert conjugate.betaln is not jax_betaln
        with compact_special_functions():  # nested: nothing more to swap, nothing restored early
            assert conjugate.betaln is not jax_betaln
        assert conjugate.betaln is not jax_betaln
        compact = size()
    assert conjugate.betaln is jax_betaln
    assert compact < 0.6 * plain, (compact, plain)
