"""docs/numpyro.md's ```python blocks, run in order in one namespace: its examples cannot drift."""

import pathlib
import re

import pytest

pytest.importorskip("numpyro")
pytest.importorskip("arviz")

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "numpyro.md"


@pytest.mark.slow  # ~30 s alone (a default fit, a 200-step SVI run, ArviZ); 84 s on the shared 2 cores
def test_numpyro_doc_examples_run():
    blocks = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)
    assert len(blocks) >= 5
    namespace = {"__name__": "numpyro_doc"}
    for index, block in enumerate(blocks):
        try:
            exec(compile(block, f"{DOC.name}[block {index}]", "exec"), namespace)
        except Exception as error:  # pragma: no cover - the message says which block failed
            raise AssertionError(f"docs/numpyro.md block {index} failed: {error!r}\n{block}") from error
    assert namespace["result"].converged
