"""Suite-wide settings: headless rendering and deterministic torch."""

from __future__ import annotations

import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_torch():
    torch.manual_seed(0)
    yield


@pytest.fixture
def columnar_results(monkeypatch):
    """The type name of every columnar gym rollout's result (TensorDict or Handover)."""
    from tdrl.envs.libs._gym_plan import GymStepPlan

    results = []
    original = GymStepPlan.columnar_rollout

    def recording(self, *args):
        result = original(self, *args)
        results.append(type(result).__name__)
        return result

    monkeypatch.setattr(GymStepPlan, "columnar_rollout", recording)
    return results
