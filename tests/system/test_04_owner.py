"""What the owner runs on the device: stop, the journal and the README's recipes, doctor, the
unit's exposure."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from tests.system.rig import (
    CGROUP,
    CONFIG,
    CONFIG_TEMPLATE,
    HOME,
    OWNER,
    TURN_S,
    UNIT,
    WORKSPACE,
    WRAPPER,
    Pet,
    cgroup_pids,
    describe_pids,
    events,
    journal,
    sh,
    shell,
    show,
    sqlite,
    wait_until,
)

README = Path(__file__).resolve().parents[2] / "README.md"

# Copied from README.md, "Reading the logs" (test_the_readme_still_has_these_recipes checks).
WHAT_RAN = """\
journalctl -u shelldon -o cat | jq -cR 'fromjson? | select(.event | IN("turn_started",
  "turn_parked", "turn_resumed", "turn_finished", "gate_finished", "tool_promoted"))
  | {ts, event, turn_id, tool, approved, model_calls, tool_executions, ms}
  | with_entries(select(.value != null))'"""
RESUMED = """\
journalctl -u shelldon -o cat | jq -cR 'fromjson? | select(.event == "turn_resumed")'"""
APPROVED_AUDIT = """\
sudo sqlite3 -readonly /var/lib/shelldon/shelldon.db "SELECT datetime(ts, 'unixepoch'),
  action, subject, json_extract(detail, '$.args') FROM audit
  WHERE action IN ('requested', 'approved', 'denied', 'expired') ORDER BY id DESC LIMIT 20;\""""
QUARANTINED = """\
journalctl -u shelldon -o cat | jq -cR 'fromjson? | select(.event == "tool_quarantined"
  or (.event == "tool_raised" and .self_coded)) | {ts, event, tool, reason, error}'"""
QUARANTINED_AUDIT = """\
sudo sqlite3 -readonly /var/lib/shelldon/shelldon.db "SELECT datetime(ts, 'unixepoch'),
  subject, json_extract(detail, '$.reason') FROM audit WHERE action = 'quarantined';\""""
TOKENS = """\
journalctl -u shelldon --since today -o cat | jq -R 'fromjson? | select(.event == "model_call")' \\
  | jq -s '{model_calls: length, input_tokens: (map(.input_tokens) | add),
           output_tokens: (map(.output_tokens) | add)}'"""
AUDIT = """\
sudo sqlite3 -readonly -header -column /var/lib/shelldon/shelldon.db "SELECT
  datetime(ts, 'unixepoch') AS at, actor, action, subject, turn_id FROM audit ORDER BY id DESC
  LIMIT 50;\""""
RECIPES = (WHAT_RAN, RESUMED, APPROVED_AUDIT, QUARANTINED, QUARANTINED_AUDIT, TOKENS, AUDIT)
WHAT_RAN_EVENTS = {
    "turn_started", "turn_parked", "turn_resumed", "turn_finished", "gate_finished",
    "tool_promoted",
}  # fmt: skip


def run(recipe: str) -> str:
    proc = shell(recipe, timeout=180)
    assert proc.returncode == 0, f"{recipe}\nexited {proc.returncode}: {proc.stderr[-2000:]}"
    # The VM has no network and no /etc/hosts line for its hostname; sudo says so. A Pi has one.
    noise = [
        line for line in proc.stderr.splitlines() if not line.startswith("sudo: unable to resolve")
    ]
    assert not noise, proc.stderr[-2000:]
    return proc.stdout


def json_lines(text: str) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert all(isinstance(r, dict) for r in rows), rows
    return rows


def test_stop_takes_at_most_5_s_and_leaves_the_cgroup_empty(pet: Pet) -> None:
    main = int(show()["MainPID"])
    started = time.monotonic()
    sh("systemctl", "stop", UNIT, timeout=60)
    took = time.monotonic() - started
    state = show()
    left = cgroup_pids()
    print(f"systemctl stop took {took:.2f} s; {state}")
    try:
        assert took <= 5.0, took
        assert state["ActiveState"] == "inactive", state
        assert state["Result"] == "success", state  # it ended by itself, not by SIGKILL
        assert not left, describe_pids(left)
        assert not Path(f"/proc/{main}").exists()
        stopping = events(journal("--since", "-2min"), "service_stopping")
        assert stopping, "no service_stopping event in the journal"
    finally:
        pet.restart()
    assert CGROUP.is_dir()


def test_the_journal_is_one_json_object_per_line_and_the_readme_recipes_work(pet: Pet) -> None:
    # Something for every recipe to find: a FREE tool call, then a RISKY one the owner approves.
    pet.brain.reply_tool_calls(("get_time", {}))
    pet.brain.reply_text("It is time for the journal.")
    mark = pet.bot.say("what time is it?")
    pet.bot.wait_text("It is time for the journal.", since=mark)
    pet.brain.reply_tool_calls(
        ("write_file", {"path": "journal-check.txt", "content": "for the recipes\n"})
    )
    pet.brain.reply_text("Wrote journal-check.txt.")
    mark = pet.bot.say("write journal-check.txt")
    ask = pet.bot.wait_keyboard(since=mark)
    turn_id = ask.buttons()[0]["callback_data"].split(":")[1]
    pet.bot.tap(ask, 0)
    pet.bot.wait_text("Wrote journal-check.txt.", since=mark)
    assert (WORKSPACE / "journal-check.txt").exists()
    time.sleep(2)  # journald writes asynchronously

    # Every line the service itself wrote is one JSON object with the common fields.
    own = journal(unit_only=True)
    assert len(own) > 20
    bad = []
    for line in own:
        try:
            obj = json.loads(line)
        except ValueError:
            bad.append(line)
            continue
        if not isinstance(obj, dict) or not {"ts", "level", "event", "actor"} <= obj.keys():
            bad.append(line)
    assert not bad, f"{len(bad)} of {len(own)} lines are not log events:\n" + "\n".join(bad[:20])

    raw = journal()
    present = {e["event"] for e in events(raw)} & WHAT_RAN_EVENTS
    ran = json_lines(run(WHAT_RAN))
    assert {str(r["event"]) for r in ran} == present, present
    assert {"turn_started", "turn_parked", "turn_resumed", "turn_finished"} <= present
    assert all(set(r) <= {"ts", "event", "turn_id", "tool", "approved", "model_calls",
                          "tool_executions", "ms"} for r in ran)  # fmt: skip
    assert any(r["event"] == "turn_parked" and r.get("turn_id") == turn_id for r in ran), ran

    resumed = json_lines(run(RESUMED))
    assert resumed and all(r["event"] == "turn_resumed" for r in resumed)
    assert any(r.get("turn_id") == turn_id and r.get("approved") is True for r in resumed)

    audit = run(APPROVED_AUDIT).splitlines()
    mine = [row for row in audit if "journal-check.txt" in row]
    assert any("|requested|write_file|" in row for row in mine), audit
    assert any("|approved|" in row for row in audit), audit

    for row in json_lines(run(QUARANTINED)):
        assert row["event"] in ("tool_quarantined", "tool_raised"), row
    run(QUARANTINED_AUDIT)

    tokens = json.loads(run(TOKENS))
    calls = events(journal("--since", "today"), "model_call")
    assert tokens["model_calls"] == len(calls) >= 4, (tokens, len(calls))
    assert tokens["input_tokens"] == sum(int(c.get("input_tokens") or 0) for c in calls) > 0
    assert tokens["output_tokens"] == sum(int(c.get("output_tokens") or 0) for c in calls) > 0

    whole = run(AUDIT).splitlines()
    assert re.match(r"at\s+actor\s+action\s+subject\s+turn_id", whole[0]), whole[:3]
    assert any(turn_id in row and "approved" in row for row in whole), whole


def test_the_readme_still_has_these_recipes() -> None:
    text = " ".join(README.read_text().split())
    for recipe in RECIPES:
        assert " ".join(recipe.split()) in text, recipe


LSM = Path("/sys/kernel/security/lsm")


def test_shelldon_doctor_as_installed_exits_0_once_configured(pet: Pet) -> None:
    proc = sh(str(WRAPPER), "doctor", check=False, timeout=180)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    # The gate works as installed (a sample tool through AST checks and sandboxed pytest), and
    # the per-turn cgroup it reports is the running service's, not this shell's.
    assert re.search(r"^ok +gate +a sample tool passed .* in [0-9.]+ s$", proc.stdout, re.M)
    assert re.search(r"^ok +sandbox cgroup per turn .*shelldon\.service/turns", proc.stdout, re.M)
    # The layers the kernel offers are the ones detected: seccomp, and Landlock where the LSM
    # list has it, else (Raspberry Pi OS; run-vm.sh --pi and --arch arm64) the namespace layer.
    layer = "landlock" if "landlock" in LSM.read_text().strip().split(",") else "userns"
    assert re.search(rf"^ok +sandbox filesystem layer +{layer}$", proc.stdout, re.M), layer
    assert re.search(r"^ok +sandbox seccomp +libseccomp found", proc.stdout, re.M)
    # Run as root, it left nothing in the pet's home that the service user cannot use.
    root_owned = sh("find", str(HOME), "-uid", "0").stdout.split()
    assert root_owned == [], root_owned
    pet.turn("doctor says hello", "Hello after the doctor.", timeout=TURN_S)


def test_the_live_unit_exposure_is_at_most_2() -> None:
    out = sh("systemd-analyze", "security", UNIT, "--no-pager", timeout=120).stdout
    match = re.search(r"Overall exposure level for shelldon\.service: (\d+\.\d+)", out)
    assert match, out[-2000:]
    print(f"exposure {match.group(1)}")
    assert float(match.group(1)) <= 2.0, out[-4000:]


def test_pairing_the_first_owner_as_the_readme_says(pet: Pet) -> None:
    """README "Deployment" step 9: an unpaired pet answers a message with a code; `sudo
    shelldon pair CODE` makes the sender the owner, with no restart."""
    text = CONFIG_TEMPLATE.format(api_base=pet.bot.api_base, owner="", base_url=pet.brain.base_url)
    CONFIG.write_text(text)  # as installed: root:shelldon 0640, kept by write_text
    before = CONFIG.stat()
    try:
        pet.restart()
        main = show()["MainPID"]
        mark = pet.bot.say("hello, who are you?")
        sent = pet.bot.wait_text("sudo shelldon pair", since=mark, timeout=60)
        match = re.search(r"sudo shelldon pair ([A-Z2-9]{4}-[A-Z2-9]{4})", sent)
        assert match, sent
        time.sleep(2)
        assert len(pet.bot.texts(mark)) == 1  # a code and nothing else: no turn ran
        proc = sh(str(WRAPPER), "pair", match.group(1), check=False, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.startswith(
            f"added user{OWNER} (id {OWNER}) to allowed_users in {CONFIG}\n"
        ), proc.stdout
        assert CONFIG.read_text() == text.replace(
            "allowed_users = []", f"allowed_users = [{OWNER}]"
        )
        after = CONFIG.stat()
        assert (after.st_uid, after.st_gid, after.st_mode) == (
            before.st_uid,
            before.st_gid,
            before.st_mode,
        )
        pet.bot.wait_text("You're paired", since=mark, timeout=TURN_S)
        pet.turn("hello after pairing", "Paired and talking.", timeout=TURN_S)
        assert show()["MainPID"] == main  # picked up without a restart
        # Run as root, it left nothing in the pet's home that the service user cannot use.
        assert sh("find", str(HOME), "-uid", "0").stdout.split() == []
        audit = wait_until(
            lambda: [r for r in sqlite("SELECT action, subject FROM audit") if "paired" in r],
            30,
            "the pairing in the audit log",
        )
        assert audit == [f"paired|{OWNER}"], audit
    finally:
        pet.configure()
