import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))

# CI runs the same examples every time (a failure there is reproducible from its log).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

from factories import constant_time, make_profile  # noqa: E402


@pytest.fixture(scope="session")
def linear_profile(tmp_path_factory):
    """Profile whose step time is `factories.linear_time` (multilinear-exact)."""
    return make_profile(tmp_path_factory.mktemp("linear"), spread=1.5)


@pytest.fixture(scope="session")
def const_profile(tmp_path_factory):
    """Every step takes exactly 10 ms."""
    return make_profile(tmp_path_factory.mktemp("const"), constant_time(0.010), name="const")
