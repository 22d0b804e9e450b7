"""Why a worker went without a Result, as its turn's cgroup (or, once the zygote removed that,
its parent) counted OOM kills: the owner is told "more memory than one turn may have" only
when the kernel really killed the turn for it. The files are written in the kernel's own
``memory.events`` format; the kernel side is proven in the VM (tests/system/test_05)."""

from __future__ import annotations

from pathlib import Path

from shelldon.proc.oom import death_kind, oom_baseline

EVENTS = "low 0\nhigh 0\nmax {max}\noom {oom}\noom_kill {kill}\noom_group_kill {group}\n"


def events(path: Path, kills: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "memory.events").write_text(EVENTS.format(max=kills, oom=kills, kill=kills, group=0))


def test_a_turn_cgroup_that_counted_an_oom_kill_died_of_memory(tmp_path: Path) -> None:
    turn = tmp_path / "turns" / "t1"
    events(turn, 2)
    assert death_kind(str(turn), baseline=None) == "memory"
    events(turn, 0)
    assert death_kind(str(turn), baseline=None) == "crash"


def test_once_the_turn_cgroup_is_gone_the_parents_count_since_the_start_decides(
    tmp_path: Path,
) -> None:
    turns = tmp_path / "turns"
    events(turns, 3)
    turn = turns / "t1"  # removed by the zygote before the TurnActor looked
    baseline = oom_baseline(str(turn))
    assert baseline == 3
    assert death_kind(str(turn), baseline) == "crash"
    events(turns, 4)
    assert death_kind(str(turn), baseline) == "memory"


def test_without_a_cgroup_or_a_memory_controller_it_is_a_crash(tmp_path: Path) -> None:
    assert death_kind(None, None) == "crash"
    assert oom_baseline(None) is None
    turn = tmp_path / "turns" / "t1"
    turn.mkdir(parents=True)  # no memory.events: no memory controller here
    assert death_kind(str(turn), oom_baseline(str(turn))) == "crash"
