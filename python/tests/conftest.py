"""Shared fixtures: seeded data, and a GPU engine when there is an adapter."""

import os

os.environ.setdefault("NODEVICE_SELECT", "1")  # keep Mesa's device-select layer quiet

import numpy as np
import pytest

import locus


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def gpu():
    """A GPU engine (lavapipe counts). Without an adapter the GPU tests are
    skipped, loudly; under CI=true they fail."""
    try:
        return locus.Engine("gpu")
    except locus.DeviceError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but no GPU adapter: {e}")
        pytest.skip(f"SKIPPED: no GPU adapter ({e})")
