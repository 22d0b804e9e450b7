"""The syscall numbers the sandbox writes by hand are the right ones on the Pi's architecture
(aarch64, Raspberry Pi OS 64-bit) as well as on x86_64 and 32-bit ARM, and every call the
seccomp filter denies exists on aarch64, so the filter does not silently lose a rule there
(issue 31). Checked against libseccomp's own tables for each architecture, on any host.
"""

from __future__ import annotations

import ctypes

import pytest

from shelldon.proc import beneath
from shelldon.proc.sandbox import landlock, userns
from shelldon.proc.sandbox.policy import DENIED_SYSCALLS
from shelldon.proc.sandbox.seccomp import _libseccomp

# AUDIT_ARCH_* values, as libseccomp's SCMP_ARCH_* tokens.
ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7, "armv7l": 0x40000028}


def resolve(arch: str, name: str) -> int:
    lib = _libseccomp()
    if lib is None:
        pytest.skip("libseccomp.so.2 is not installed")
    fn = lib.seccomp_syscall_resolve_name_arch
    fn.restype = ctypes.c_int
    fn.argtypes = (ctypes.c_uint32, ctypes.c_char_p)
    return int(fn(ARCHES[arch], name.encode()))


@pytest.mark.parametrize("arch", tuple(ARCHES))
def test_pivot_root_is_called_by_its_number_on_each_architecture(
    arch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.uname", lambda: _Uname(arch))
    assert userns._pivot_root_nr() == resolve(arch, "pivot_root")


@pytest.mark.parametrize("arch", tuple(ARCHES))
def test_openat2_and_landlock_share_one_number_on_every_architecture(arch: str) -> None:
    assert resolve(arch, "openat2") == beneath.SYS_OPENAT2
    assert resolve(arch, "landlock_create_ruleset") == landlock._NR_LANDLOCK_CREATE_RULESET
    assert resolve(arch, "landlock_add_rule") == landlock._NR_LANDLOCK_ADD_RULE
    assert resolve(arch, "landlock_restrict_self") == landlock._NR_LANDLOCK_RESTRICT_SELF


def test_every_denied_syscall_exists_on_the_pi() -> None:
    # The filter skips a name the running architecture lacks: on aarch64 that would be a rule
    # gone without a word. Every name must resolve there (and on x86_64, the dev machine).
    for arch in ("aarch64", "x86_64"):
        missing = [name for name in DENIED_SYSCALLS if resolve(arch, name) < 0]
        assert missing == [], (arch, missing)
    for name in ("clone", "clone3", "socket"):  # the calls the filter matches on arguments
        assert resolve("aarch64", name) >= 0, name


class _Uname:
    def __init__(self, machine: str) -> None:
        self.machine = machine
