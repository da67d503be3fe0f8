"""Shared fixtures: one context for the session (CLATTN_DEVICE picks it), seeded inputs, poisoned
outputs. With CI=true a missing OpenCL device fails the run instead of skipping it."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import clattn  # noqa: E402

SEED = int(os.environ.get("CLATTN_TEST_SEED", "12345"))


def pytest_report_header(config):
    return f"clattn {clattn.__version__}, CLATTN_TEST_SEED={SEED}"


@pytest.fixture(scope="session")
def ctx():
    try:
        c = clattn.Context()
    except (clattn.NoPlatform, clattn.DeviceNotFound) as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no OpenCL device (CI=true: a failure): {e}")
        pytest.skip(f"no OpenCL device: {e}")
    clattn.set_default_context(c)
    print(f"device: {c.description}")
    yield c
    clattn.set_default_context(None)
    c.close()


@pytest.fixture
def rng(request):
    # One stream per test, reproducible from the printed seed and the test's name.
    return np.random.default_rng([SEED, sum(map(ord, request.node.name))])


def poisoned(ctx, shape, dtype="float32"):
    """An output Array filled with NaN, so an element the op does not write fails."""
    return ctx.full(shape, float("nan"), dtype)
