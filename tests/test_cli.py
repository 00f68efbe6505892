from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap

import pytest

from tdrl._utils import drop_unset_tensordict_options
from tdrl.cli import build_parser, main

av = pytest.importorskip("av")


def run_tdrl(*args, cwd=None, timeout=120):
    env = dict(os.environ, SDL_VIDEODRIVER="dummy", PYGAME_HIDE_SUPPORT_PROMPT="1")
    drop_unset_tensordict_options(env)
    return subprocess.run(
        [sys.executable, "-m", "tdrl", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize("command", ["demo", "check-env", "bench", "info"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert f"tdrl {command}" in text and "--help" in text


def test_top_level_help_lists_commands():
    result = run_tdrl("--help")
    assert result.returncode == 0
    for command in ("demo", "check-env", "bench", "info"):
        assert command in result.stdout


def test_info_prints_versions_and_libraries():
    result = run_tdrl("info")
    assert result.returncode == 0, result.stderr
    for name in ("python", "torch", "tensordict", "numpy", "gymnasium", "tdrl"):
        assert f"\n{name} " in "\n" + result.stdout
    assert "simulator libraries" in result.stdout
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines() if line}
    assert rows["gymnasium"][0] == "yes"
    assert rows["isaacgym"][:2] == ["no", "-"]  # not installable here
    assert rows["mpe2"][0] == "yes"  # installed by the lock, next to pettingzoo
    data = result.stdout.split("other libraries")[1]
    data_rows = {line.split()[0]: line.split()[1] for line in data.splitlines()[3:] if line}
    assert data_rows["h5py"] == importlib.metadata.version("h5py")
    assert set(data_rows) >= {
        "minari",
        "datasets",
        "transformers",
        "tokenizers",
        "scikit-learn",
        "ray",
    }


def test_check_env_prints_specs_and_passes():
    result = run_tdrl("check-env", "CartPole-v1")
    assert result.returncode == 0, result.stderr
    for name in ("observation_spec", "action_spec", "reward_spec", "done_spec"):
        assert name in result.stdout
    assert "check_env_specs: OK" in result.stdout


def test_check_env_unknown_id_fails_cleanly():
    result = run_tdrl("check-env", "NoSuchEnv-v0")
    assert result.returncode == 2
    assert "cannot build gymnasium:NoSuchEnv-v0" in result.stderr
    assert "Traceback" not in result.stderr


def test_demo_runs_end_to_end(tmp_path):
    out = tmp_path / "demo"
    result = run_tdrl("demo", "--frames", "200", "--workers", "2", "--out", str(out))
    assert result.returncode == 0, result.stderr
    for text in ("frames/s", "buffer size", "200 transitions", "checkpoint", "files written"):
        assert text in result.stdout
    assert "identical" in result.stdout
    (video,) = (out / "logs").glob("demo_CartPole-v1_*/videos/rollout_0.mp4")
    with av.open(str(video)) as container:
        assert sum(1 for _ in container.decode(video=0)) > 0
    assert (out / "checkpoint").is_dir() and any((out / "checkpoint").iterdir())
    (scalars,) = (out / "logs").glob("demo_CartPole-v1_*/scalars/buffer_size.csv")
    assert scalars.read_text().splitlines()[-1] == "200,200"


@pytest.mark.parametrize("option", ["--frames", "--workers"])
def test_demo_rejects_non_positive_numbers(option, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["demo", option, "0"])
    assert exit_info.value.code == 2
    assert "expected a positive integer, got 0" in capsys.readouterr().err


def _bench_folder(tmp_path):
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "bench_good.py").write_text(
        textwrap.dedent(
            """
            import json, sys
            assert sys.argv[1:] == ["--quick"], sys.argv
            print("a table line")
            print(json.dumps({"ratio": 1.5, "target": 3.0, "parallel_over_async": 2.0,
                              "results": [{"env": "counting", "batch": 1, "x_ratio": 4.0,
                                           "x_target": 2.0}]}))
            """
        )
    )
    (folder / "bench_broken.py").write_text("raise SystemExit('boom')\n")
    return folder


def test_bench_reports_ratios_targets_and_failures(tmp_path):
    folder = _bench_folder(tmp_path)
    result = run_tdrl("bench", "--dir", str(folder))
    assert result.returncode == 1  # one script failed
    lines = result.stdout.splitlines()
    assert lines[0] == "| benchmark | ratio | value | target | status |"
    assert "| bench_good | ratio | 1.500 | <= 3 | ok |" in lines
    assert "| bench_good | parallel_over_async | 2.000 | - | - |" in lines
    assert "| bench_good | env=counting batch=1 x_ratio | 4.000 | <= 2 | MISSED |" in lines
    assert any(line.startswith("| bench_broken |") and "FAILED" in line for line in lines)
    assert "2 scripts, 1 failed, 1 ratios off target" in result.stdout


def test_bench_only_filter(tmp_path):
    folder = _bench_folder(tmp_path)
    result = run_tdrl("bench", "--dir", str(folder), "--only", "good")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "bench_broken" not in result.stdout


def test_check_env_builds_with_the_chosen_backend():
    pytest.importorskip("dm_control")
    result = run_tdrl("check-env", "--lib", "dm_control", "cheetah/run")
    assert result.returncode == 0, result.stderr
    assert "dm_control:cheetah/run (DMControlEnv)" in result.stdout
    assert "check_env_specs: OK" in result.stdout


def test_check_env_names_unknown_and_missing_backends(capsys):
    # in-process: the three error paths need no fresh interpreter each
    assert main(["check-env", "--lib", "nosuchlib", "x"]) == 2
    err = capsys.readouterr().err
    assert "--lib: expected one of" in err and "'nosuchlib'" in err
    assert main(["check-env", "--lib", "isaacgym", "Ant"]) == 2
    assert "pip install isaacgym" in capsys.readouterr().err
    assert main(["check-env", "--lib", "dm_control", "cheetah"]) == 2
    err = capsys.readouterr().err
    assert "DOMAIN/TASK" in err and "Traceback" not in err


def test_bench_applies_known_targets_with_their_direction(tmp_path):
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "bench_collectors.py").write_text("print('{\"ratio\": 1.5}')\n")
    (folder / "bench_ray_buffer.py").write_text(
        'print(\'{"extend_ratio": 0.9, "sample_ratio": 3.5}\')\n'
    )
    lines = run_tdrl("bench", "--dir", str(folder)).stdout.splitlines()
    assert "| bench_collectors | ratio | 1.500 | >= 1.6 | MISSED |" in lines
    assert "| bench_ray_buffer | extend_ratio | 0.900 | <= 3 | ok |" in lines
    assert "| bench_ray_buffer | sample_ratio | 3.500 | <= 3 | MISSED |" in lines
