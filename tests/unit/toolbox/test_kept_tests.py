"""Promotion keeps the tool's test in ``<home>/toolbox/tests/`` so an export can carry it."""

from __future__ import annotations

import shutil

from shelldon.config import Settings
from shelldon.toolbox.toolbox import Toolbox
from tests.unit.selfcode.samples import ADDER, ADDER_TEST, promote


def test_promotion_keeps_the_test_out_of_staging(settings: Settings, sc: Toolbox) -> None:
    promote(sc, "adder", ADDER, ADDER_TEST)
    kept = sc.kept_test("adder")
    assert kept == settings.toolbox / "tests" / "test_adder.py"
    assert kept.read_text() == ADDER_TEST
    assert list(sc.staging_dir.iterdir()) == []
    # Discovery never sees it: only the module and the manifest are live.
    assert sorted(p.name for p in sc.live_dir.iterdir()) == ["adder.py", "manifest.json"]


def test_a_replacement_brings_its_own_test(sc: Toolbox) -> None:
    promote(sc, "adder", ADDER, ADDER_TEST)
    newer_test = ADDER_TEST.replace("test_adds_one", "test_adds_one_again")
    promote(sc, "adder", ADDER.replace("Add one", "Add 1"), newer_test, replace=True)
    kept = sc.kept_test("adder")
    assert kept is not None and kept.read_text() == newer_test


def test_a_discarded_tool_keeps_no_test(sc: Toolbox) -> None:
    staged = sc.stage("adder", ADDER, ADDER_TEST)
    shutil.rmtree(staged.directory)  # what the gate does with its directory once it is done
    assert sc.kept_test("adder") is None


def test_a_replacement_without_a_test_drops_the_old_one(sc: Toolbox) -> None:
    promote(sc, "adder", ADDER, ADDER_TEST)
    promote(sc, "adder", ADDER.replace("Add one", "Add 1"), "", replace=True)
    assert sc.kept_test("adder") is None


def test_a_quarantined_tool_keeps_its_test_for_restore_and_export(sc: Toolbox) -> None:
    promote(sc, "adder", ADDER, ADDER_TEST)
    sc.quarantine("adder", "raised three times")
    assert sc.kept_test("adder") is not None
    sc.restore("adder")
    assert sc.kept_test("adder") is not None
