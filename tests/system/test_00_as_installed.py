"""The pet as deploy/install.sh left it at boot, before the owner configured anything: the
enabled unit started, refused at once with exit 78 and one line naming what is missing, and
systemd did not restart it (RestartPreventExitStatus=78) — no crash loop at boot.

Runs first (file order), before any test configures the service."""

from __future__ import annotations

import pytest

from tests.system.rig import events, journal, show


@pytest.mark.smoke
def test_an_unconfigured_pet_fails_once_at_boot_with_78_and_says_why() -> None:
    state = show("ActiveState", "Result", "ExecMainStatus", "NRestarts", "ExecMainStartTimestamp")
    print(f"as installed, at boot: {state}")
    assert state["ExecMainStartTimestamp"], state  # it was started at boot (enabled)
    assert state["ExecMainStatus"] == "78", state
    assert state["Result"] == "exit-code" and state["ActiveState"] == "failed", state
    assert state["NRestarts"] == "0", state
    own = journal(unit_only=True)
    refused = events(own, "start_refused")
    assert len(refused) == 1, own
    reason = refused[0]["reason"]
    assert "no bot token configured" in reason
    assert "no API key configured" in reason  # install.sh's config names the anthropic brain
    others = [e for e in events(own) if e.get("level") == "error"]
    assert [e["event"] for e in others] == ["start_refused"], others
    assert not [line for line in own if "Traceback" in line]
