"""The agent's settings: agent.toml's [store], [worker] and [runtimes], ``serve`` flags over
them."""

from __future__ import annotations

import pytest
from edgequal.agent.cli import main
from edgequal.agent.config import AgentSettings, parse_size_bytes, read_settings
from edgequal.contract.errors import BadInput


def test_sizes():
    assert parse_size_bytes(4096, "x") == 4096
    assert parse_size_bytes("10GiB", "x") == 10 * 2**30
    assert parse_size_bytes("1.5 MB", "x") == 1_500_000
    assert parse_size_bytes("512mib", "x") == 512 * 2**20
    for bad in ("-1", "ten", "1.5B", "3 parsecs", -1, True, 2.5, None):
        with pytest.raises(BadInput, match="^quota: "):
            parse_size_bytes(bad, "quota")


def test_flags_override_agent_toml(tmp_path):
    (tmp_path / "agent.toml").write_text(
        '[store]\nquota = "10GiB"\nmin_free = "1GiB"\n[worker]\nmemory_limit = "512MiB"\n'
        '[coload.cam]\nargv = ["/bin/true"]\n[runtimes]\nprobe_timeout_s = 45\n'
    )
    settings = read_settings(tmp_path, quota_bytes=2**30, min_free_bytes=None)
    assert settings == AgentSettings(
        quota_bytes=2**30,
        min_free_bytes=2**30,
        memory_limit_bytes=512 * 2**20,
        env_probe_timeout_s=45.0,
    )
    assert settings.memory_limit_mb == 512
    assert settings.store_options() == {"quota_bytes": 2**30, "reserve_bytes": 2**30}
    assert settings.server_options() == {
        "quota_bytes": 2**30,
        "min_free_bytes": 2**30,
        "memory_limit_mb": 512,
        "env_probe_timeout_s": 45.0,
    }
    assert read_settings(tmp_path / "none") == AgentSettings()


@pytest.mark.parametrize(
    "text, message",
    [
        ("[store]\nquota_gb = 10\n", r"unknown key \[store\] quota_gb"),
        ('[store]\nquota = "lots"\n', r"\[store\] quota: not a size"),
        ("store = 3\n", r"\[store\] must be a table"),
        ("[store\n", r"agent configuration .*agent.toml: "),
        ("[runtimes]\nprobe_timeout_s = 0\n", r"\[runtimes\] probe_timeout_s: not a number of s"),
        ('[runtimes]\nprobe_timeout_s = "1m"\n', r"probe_timeout_s: not a number of seconds"),
        ("[runtimes]\nprobe_timeout = 30\n", r"unknown key \[runtimes\] probe_timeout$"),
    ],
)
def test_a_bad_agent_toml_is_one_line_exit_2(tmp_path, capsys, text, message):
    (tmp_path / "agent.toml").write_text(text)
    with pytest.raises(BadInput, match=message):
        read_settings(tmp_path)
    assert main(["--state-dir", str(tmp_path), "serve", "--listen", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(
        "edgequal-agent: error: agent configuration"
    )


def test_a_bad_size_flag_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--state-dir", str(tmp_path), "serve", "--memory-limit", "a lot"])
    assert e.value.code == 2
    assert "argument --memory-limit: size: not a size: 'a lot'" in capsys.readouterr().err
