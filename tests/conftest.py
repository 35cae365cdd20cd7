"""Shared pytest configuration: one backend per process (`KERAS_BACKEND`)."""

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import keras  # noqa: E402

try:
    from hypothesis import settings

    settings.register_profile("ci", max_examples=12, deadline=None)
    settings.register_profile("thorough", max_examples=300, deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # pragma: no cover
    pass

BACKEND = keras.backend.backend()


def pytest_collection_modifyitems(config, items):
    for item in items:
        for name in ("tensorflow", "jax", "torch"):
            if name in item.keywords and BACKEND != name:
                item.add_marker(pytest.mark.skip(reason=f"{name} backend only"))


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Each test starts with the float32 policy and a clear session."""
    yield
    keras.config.set_dtype_policy("float32")
    # free_memory=False: the gc.collect() it would run costs ~1 s a test on torch.
    keras.utils.clear_session(free_memory=False)
