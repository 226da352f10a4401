"""A plan naming a runtime environment the device does not hold is refused from the
device's Info, before the model or golden set is uploaded."""

from __future__ import annotations

import pytest
from edgequal.cli.main import main as edgequal_main


@pytest.mark.slow
def test_an_unknown_environment_is_refused_before_the_model_is_uploaded(
    start_agent, token_file, example_models, golden_sets, capsys
):
    agent = start_agent("bench", "--token-file", str(token_file))
    argv = ["devices", "trust", "bench", agent.address, "--token-file", str(token_file)]
    assert edgequal_main(argv) == 0
    capsys.readouterr()
    rc = edgequal_main(
        ["qualify", str(example_models["classifier"]), "--golden", str(golden_sets["classifier"])]
        + ["--device", "bench", "--runtime-env", "onnxruntime-1.17.3"]
        + ["--runtime-env", "default", "--sustain", "0"]
    )
    err = capsys.readouterr().err
    assert rc == 2, err
    assert (
        "unknown runtime environment 'onnxruntime-1.17.3' on this device; installed: default" in err
    )
    assert "edgequal-agent runtime add" in err
    # Nothing was uploaded: the agent stores no artifact.
    assert agent.stored_files() == []
