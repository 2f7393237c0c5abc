"""Estimates before large work: a fleet's memory grows with its engines, and the check
refuses one that would not fit, naming the flag that shrinks it."""

from __future__ import annotations

import pytest

from chunksim.cli.memory import ENGINE_BYTES, check_memory, estimate_bytes
from chunksim.sim.fleet.config import FleetConfig


def test_each_engine_adds_its_state():
    one = estimate_bytes(100, 0)
    assert estimate_bytes(100, 0, engines=1) == one
    assert estimate_bytes(100, 0, engines=1001) - one == 1000 * ENGINE_BYTES


def test_a_fleet_too_large_is_refused_naming_replicas():
    with pytest.raises(ValueError, match=r"10,000 engines.*--replicas"):
        check_memory(100, 0, available=16 * 2**30, engines=10_000)
    assert check_memory(100, 0, available=16 * 2**30, engines=10) > 0


def test_engine_count_counts_every_instance():
    assert FleetConfig().engine_count == 1
    assert FleetConfig(replicas=8).engine_count == 8
    assert FleetConfig(pd="2:3").engine_count == 5
