"""Data is an argument: no compiled program embeds the data (or anything over 1 MB).

Every ``jax.jit`` the library creates while a test runs is wrapped: its first call is lowered
(``.lower(...).as_text()``, StableHLO) and the largest constant of the program is measured.
The data sets here are over 1 MB (600 x 600 float32 = 1.44 MB), so a program that closes
over them, over ``log x!`` or over the trained parameters of a large model fails. Covered:
``grepvi.fit`` with the default procedure (trial and windows) and with a fixed schedule, the
command line (``runs.train`` chunks, the evaluation-only ELBO of ``--elbo-samples``, the
held-out refit and log-likelihood), the minibatch step and the held-out perplexity.
"""

import re

import jax
import numpy as np
import pytest

import grepvi
from grepvi import cli
from grepvi.diagnostics import evaluation
from grepvi.errors import NotConvergedWarning
from grepvi.models import beta_gamma_mf, sparse_gamma_def

LIMIT = 1 << 20  # bytes
ROWS, COLUMNS = 600, 600  # 1.44 MB of float32
HEX_CONSTANT = re.compile(r'dense<"0x([0-9A-Fa-f]+)">')


def largest_constant(text: str) -> int:
    """Bytes of the largest hex-encoded constant in a lowered program's text."""
    return max((len(match) // 2 for match in HEX_CONSTANT.findall(text)), default=0)


class _Checked:
    """A ``jax.jit`` whose first call (or ``lower``) measures the lowered program's constants."""

    def __init__(self, jitted, name, seen):
        self._jitted, self._name, self._seen = jitted, name, seen
        self._checked = False

    def _check(self, *args, **kwargs):
        if not self._checked:
            self._checked = True
            size = largest_constant(self._jitted.lower(*args, **kwargs).as_text())
            self._seen.append((self._name, size))

    def __call__(self, *args, **kwargs):
        self._check(*args, **kwargs)
        return self._jitted(*args, **kwargs)

    def lower(self, *args, **kwargs):
        self._check(*args, **kwargs)
        return self._jitted.lower(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._jitted, name)


@pytest.fixture
def programs(monkeypatch):
    """The (name, largest constant in bytes) of every program jitted during the test."""
    seen = []
    original = jax.jit

    def checked_jit(fun=None, **options):
        if fun is None:
            return lambda f: checked_jit(f, **options)
        return _Checked(original(fun, **options), getattr(fun, "__qualname__", repr(fun)), seen)

    monkeypatch.setattr(jax, "jit", checked_jit)
    return seen


def _assert_small(programs, minimum_count):
    assert len(programs) >= minimum_count, programs
    big = [(name, size) for name, size in programs if size > LIMIT]
    assert not big, f"programs embedding constants over 1 MB: {big}"


def _counts():
    return np.random.default_rng(0).poisson(1.0, (ROWS, COLUMNS)).astype(np.float32)


def test_the_detector_finds_an_embedded_data_set(programs):
    """The check can fail: a closure over the data is caught."""
    x = jax.numpy.asarray(_counts())
    jax.jit(lambda scale: scale * x)(2.0)
    assert programs and programs[0][1] >= x.nbytes


@pytest.mark.slow  # 27 s on CI; the minibatch and perplexity programs' test and the NumPyro
# adapter's (test_numpyro_model.py) stay in the fast tier
def test_fit_programs_take_the_data_as_an_argument(programs):
    model = sparse_gamma_def(_counts(), layer_sizes=(2,))
    arguments = dict(local_logdensity_fn=model.local_logdensity_fn, data=model.data, progress=False)
    with pytest.warns(NotConvergedWarning):
        grepvi.fit(model.logdensity_fn, model.latents(), num_steps=300, **arguments)
    grepvi.fit(model.logdensity_fn, model.latents(), num_steps=20, step_size=0.1, **arguments)
    _assert_small(programs, 2)  # one window program per fit (the default procedure's rules share it)


@pytest.mark.slow  # 59 s on CI; the fits' and the minibatch programs' tests stay in the fast tier
def test_command_line_programs_take_the_data_as_an_argument(programs, tmp_path):
    common = ["--dataset", "synthetic", "--synthetic-size", f"{ROWS},{ROWS},{COLUMNS}", "--quiet"]
    common += ["--eval-samples", "3", "--refit-steps", "20", "--chunk-size", "10"]
    assert (
        cli.main(
            [
                "fit",
                "--model",
                "beta-gamma-mf",
                "--num-factors",
                "2",
                "--num-steps",
                "20",
                "--step-size",
                "0.1",
            ]
            + ["--elbo-samples", "2", "--out", str(tmp_path / "fixed")]
            + common
        )
        == 0
    )
    assert (
        cli.main(
            ["fit", "--model", "beta-gamma-mf", "--num-factors", "2", "--num-steps", "200"]
            + ["--out", str(tmp_path / "default")]
            + common
        )
        == 0
    )
    _assert_small(programs, 5)


def test_minibatch_and_perplexity_programs_take_the_data_as_an_argument(programs):
    from grepvi.inference import minibatch

    model = beta_gamma_mf((_counts() > 0).astype(np.float32), num_factors=2)
    problem = minibatch.minibatch_problem(model, 50)
    optimizer = grepvi.advi_stepsize(0.1)
    state = minibatch.init(jax.random.key(0), problem, optimizer)
    estimator = grepvi.get_estimator("grep")
    step = jax.jit(lambda s, data: minibatch.step(s, problem, estimator, optimizer, data))
    state, info = step(state, problem.data)
    assert np.isfinite(float(info.elbo))

    poisson = sparse_gamma_def(_counts(), layer_sizes=(2,))
    families = poisson.latents()
    params = {name: family.init_params(jax.random.key(1)) for name, family in families.items()}
    perplexity = evaluation.heldout_perplexity(jax.random.key(2), poisson, families, params, _counts(), 2)
    assert np.all(np.isfinite(perplexity))
    _assert_small(programs, 2)
