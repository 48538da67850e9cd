"""The Vulkan backend's tests' fixtures: a device on every software driver and copy path (``CONFIGS``), with
the validation layer on when it is installed and no validation message left at its end, and a stream on it."""

from __future__ import annotations

import pytest

from ironaccel.cts import targets
from vulkan_helpers import CONFIGS, LAYER, missing


@pytest.fixture(params=CONFIGS, ids=[f"{t.split('/')[1]}-{'mapped' if d else 'staged'}" for t, d in CONFIGS])
def device(request, monkeypatch):
    target, direct = request.param
    why = missing(target)
    if why:
        pytest.skip(f"{target}: {why}")
    from ironaccel.backends.vulkan import VulkanBackend

    for key, value in targets.get(target).environment().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("IRONACCEL_VK_DIRECT_MAPPING", "1" if direct else "0")
    dev = VulkanBackend().open_device(0, validation=LAYER.exists())
    assert targets.get(target).matches(dev.info), dev.info
    yield dev
    messages = dev.diagnostics()
    dev.close()
    assert not messages, "\n".join(messages)


@pytest.fixture
def stream(device):
    return device.create_stream()

