"""Data-parallel G-REP (grepvi.inference.sharding) against the single-device computation.

Runs in a subprocess: the four CPU devices of ``--xla_force_host_platform_device_count=4``
must be requested before JAX initializes, and this test process has already started JAX.
"""

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec
    from grepvi.estimators.base import get_estimator
    from grepvi.inference.state import init, step
    from grepvi.models import sparse_gamma_def
    import optax
    from grepvi.errors import ConfigError
    from grepvi.inference.sharding import data_parallel, make_mesh, state_shardings

    assert len(jax.devices()) == 4, jax.devices()
    data = np.random.default_rng(0).poisson(2.0, (16, 12)).astype(np.float32)
    model = sparse_gamma_def(data, layer_sizes=(4,))
    target = model.target()
    estimator = get_estimator("grep")
    LR = 0.01
    optimizer = optax.sgd(LR)  # params - LR * (-grad): the update is the gradient
    state = init(jax.random.key(1), target, optimizer)
    mesh = make_mesh()

    # Rows of z1, z2 on four devices, weights replicated; a row count that does not split is refused.
    shardings = state_shardings(state, model.local_latent_names, mesh)
    assert shardings.params["z1"]["mean"].spec == PartitionSpec("n")
    assert shardings.params["W0"]["mean"].spec == PartitionSpec()
    try:
        state_shardings({"z1": np.zeros((6, 2))}, ["z1"], mesh)
        raise AssertionError("6 rows over 4 devices accepted")
    except ConfigError as error:
        assert "do not split evenly" in str(error)

    # The first SGD step is the gradient (times the step size); then a few more steps.
    parallel = data_parallel(target, estimator, optimizer, model, mesh)
    data = parallel.place_data(model.data)
    assert data["x"].sharding.spec == PartitionSpec("n")  # each device holds its rows of the data
    assert data["x"].addressable_shards[0].data.shape == (4, 12)
    plain = jax.jit(lambda s, d: step(s, target, estimator, optimizer, d))
    reference, current = plain(state, model.data)[0], parallel.step(parallel.place_state(state), data)[0]
    assert len(current.params["z1"]["mean"].sharding.device_set) == 4
    assert current.params["z1"]["mean"].sharding.spec == PartitionSpec("n")
    def grad(new):
        return jax.tree_util.tree_map(lambda a, b: (np.asarray(a) - np.asarray(b)) / LR, new, state.params)

    for (path, g_single), g_sharded in zip(
        jax.tree_util.tree_leaves_with_path(grad(reference.params)),
        jax.tree_util.tree_leaves(grad(current.params)),
    ):
        scale = float(np.max(np.abs(g_single)))
        np.testing.assert_allclose(g_sharded, g_single, rtol=1e-3, atol=1e-3 * scale, err_msg=str(path))
    for _ in range(3):
        reference, info_reference = plain(reference, model.data)
        current, info = parallel.step(current, data)
        np.testing.assert_allclose(float(info.elbo), float(info_reference.elbo), rtol=1e-4)
    for a, b in zip(jax.tree_util.tree_leaves(reference.params), jax.tree_util.tree_leaves(current.params)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5)
    print("OK")
    """
)


def test_sharded_gradient_and_steps_match_single_device():
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
    env["JAX_PLATFORMS"] = "cpu"
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout


WORKER = textwrap.dedent(
    """
    import sys
    import jax
    process_id, num_processes, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    if num_processes > 1:
        jax.distributed.initialize(f"localhost:{port}", num_processes=num_processes, process_id=process_id)
    import numpy as np, optax
    from jax.experimental import multihost_utils
    from grepvi.estimators.base import get_estimator
    from grepvi.inference.state import init
    from grepvi.models import sparse_gamma_def
    from grepvi.inference.sharding import data_parallel, process_rows

    assert jax.process_count() == num_processes
    data = np.random.default_rng(0).poisson(2.0, (16, 12)).astype(np.float32)
    model = sparse_gamma_def(data, layer_sizes=(4,))
    target = model.target()
    optimizer = optax.adam(0.01)
    state = init(jax.random.key(1), target, optimizer)  # the same in every process (same seed)
    parallel = data_parallel(target, get_estimator("grep"), optimizer, model)
    rows = process_rows(16)  # this process's rows only
    data = parallel.place_data({name: np.asarray(value)[rows] for name, value in model.data.items()})
    state = parallel.place_state(state)
    for _ in range(5):
        state, info = parallel.step(state, data)
    params = multihost_utils.process_allgather(state.params, tiled=True)
    if process_id == 0:
        leaves = jax.tree_util.tree_leaves_with_path(params)
        np.savez(out, **{jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves})
    print("OK", float(info.elbo))
    """
)


def _free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


@pytest.mark.slow  # 29 s on CI; the one-process sharded steps stay in the fast tier
def test_two_processes_reproduce_one_process(tmp_path):
    """``jax.distributed`` on localhost: two processes, each holding half of the rows, give the
    parameters of one process holding all of them (five Adam steps, same seed)."""
    import numpy as np

    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    one, two = tmp_path / "one.npz", tmp_path / "two.npz"
    single = subprocess.run(
        [sys.executable, str(script), "0", "1", "0", str(one)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert single.returncode == 0, single.stdout + single.stderr
    port = str(_free_port())
    workers = [
        subprocess.Popen(
            [sys.executable, str(script), str(i), "2", port, str(two)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [worker.communicate(timeout=300)[0] for worker in workers]
    assert all(worker.returncode == 0 for worker in workers), "\n".join(outputs)
    reference, distributed = np.load(one), np.load(two)
    assert sorted(reference.files) == sorted(distributed.files) and len(reference.files) == 4
    for name in reference.files:
        np.testing.assert_allclose(distributed[name], reference[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.slow  # 13 s on CI; the sharded steps' test stays in the fast tier
def test_docstring_examples():
    import doctest

    import grepvi.inference.minibatch
    import grepvi.inference.sharding

    for module in (grepvi.inference.sharding, grepvi.inference.minibatch):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module
