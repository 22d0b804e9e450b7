"""Promotion keeps the tool's test in ``tools-tests/`` so an export can carry it."""

from __future__ import annotations

import pytest

from shelldon.config import Settings
from shelldon.core.selfcode import SelfCode
from tests.unit.selfcode.samples import ADDER, ADDER_TEST


@pytest.fixture
def sc(settings: Settings) -> SelfCode:
    return SelfCode(settings.workspace, settings.limits)


def test_promotion_keeps_the_test_out_of_staging(sc: SelfCode) -> None:
    sc.stage("adder", ADDER, ADDER_TEST)
    sc.promote("adder")
    kept = sc.kept_test("adder")
    assert kept == sc.workspace / "tools-tests" / "test_adder.py"
    assert kept.read_text() == ADDER_TEST
    assert list(sc.staging_dir.iterdir()) == []
    # Discovery never sees it: only the module and the manifest are live.
    assert sorted(p.name for p in sc.live_dir.iterdir()) == ["adder.py", "manifest.json"]


def test_a_replacement_brings_its_own_test(sc: SelfCode) -> None:
    sc.stage("adder", ADDER, ADDER_TEST)
    sc.promote("adder")
    newer_test = ADDER_TEST.replace("test_adds_one", "test_adds_one_again")
    sc.stage("adder", ADDER.replace("Add one", "Add 1"), newer_test, replace=True)
    sc.promote("adder", replace=True)
    kept = sc.kept_test("adder")
    assert kept is not None and kept.read_text() == newer_test


def test_a_discarded_tool_keeps_no_test(sc: SelfCode) -> None:
    sc.stage("adder", ADDER, ADDER_TEST)
    sc.discard("adder")
    assert sc.kept_test("adder") is None


def test_a_quarantined_tool_keeps_its_test_for_restore_and_export(sc: SelfCode) -> None:
    sc.stage("adder", ADDER, ADDER_TEST)
    sc.promote("adder")
    sc.quarantine("adder", "raised three times")
    assert sc.kept_test("adder") is not None
    sc.restore("adder")
    assert sc.kept_test("adder") is not None
