#!/usr/bin/env bash
# Run the system tests (tests/system) in the Debian bookworm VM, under real systemd, on the
# product as deploy/install.sh installed it. On the host, as root:
#
#   tests/system/run-vm.sh [--arch arm64] [--pi] [--smoke] [--memory-off] [--rebuild] [--tests PATH]
#
#   --arch arm64  the Pi's own architecture and memory: an arm64 image (tests/system/build-arm64.sh,
#                 in $SHELLDON_VM_WORKDIR, default /var/tmp/shelldon-vm-arm64) booted with
#                 qemu-system-aarch64 -M virt -cpu cortex-a53 -m 512, always without Landlock as
#                 Raspberry Pi OS's kernel (so --pi is implied); needs apt-get install
#                 qemu-system-arm qemu-user-static binfmt-support mmdebstrap e2fsprogs
#   --pi          boot without Landlock, as Raspberry Pi OS's kernel (run.sh --pi)
#   --smoke       only the tests marked smoke (install, READY, a turn, a tool, a restart): CI
#   --memory-off  boot with 512 MB and cgroup_disable=memory, as a stock Raspberry Pi kernel
#                 without cgroup_enable=memory, and run test_06_memory_off.py there
#   --rebuild     build the image again even if it is there and current
#   --tests PATH  run only these tests (a pytest path below tests/system, e.g. the figures of
#                 test_07_figures.py)
#
# The image is built with ../shared/vm/build.sh (beside this repository; else /work/shared), or
# build-arm64.sh, in $SHELLDON_VM_WORKDIR (default /var/tmp/shelldon-vm) when it is missing,
# when --rebuild, or when it holds another commit than this checkout's HEAD: the build clones
# committed work only, and the VM runs the tests from that clone, so commit first. Only the
# first build needs the network (Debian packages and the package registries); the VM itself has
# none. Prints the wall-clock time of the build, of boot + suite and of the suite alone; exits
# with the suite's status.
set -euo pipefail

PI=() MARK=() REBUILD=0 MEMORY_OFF=0 OFF="" TESTS=tests/system ARCH=x86_64
while [ $# -gt 0 ]; do
  arg=$1; shift
  case "$arg" in
    --arch) ARCH=${1:-}; shift || true ;;
    --arch=*) ARCH=${arg#--arch=} ;;
    --pi) PI=(--pi) ;;
    --smoke) MARK=(-m smoke) ;;
    --memory-off) MEMORY_OFF=1 OFF=", memory off" TESTS=tests/system/test_06_memory_off.py ;;
    --rebuild) REBUILD=1 ;;
    --tests) TESTS=${1:-}; shift || true ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-vm.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
case "$ARCH" in
  x86_64|amd64) ARCH=x86_64 ;;
  arm64|aarch64) ARCH=arm64 PI=(--pi) ;;
  *) echo "run-vm.sh: --arch is x86_64 or arm64, not ${ARCH:-nothing}" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "run-vm.sh: run it as root (the VM build needs it)" >&2; exit 2; }

REPO=$(cd "$(dirname "$0")/../.." && pwd)
VM=$(dirname "$REPO")/shared/vm
[ -x "$VM/build.sh" ] || VM=/work/shared/vm
[ -x "$VM/build.sh" ] && [ -x "$VM/run.sh" ] || { echo "run-vm.sh: no shared/vm/build.sh beside $REPO nor in /work/shared" >&2; exit 2; }
if [ "$ARCH" = arm64 ]; then
  W=${SHELLDON_VM_WORKDIR:-/var/tmp/shelldon-vm-arm64} KERNEL=Image
  BUILD=("$REPO/tests/system/build-arm64.sh" "$REPO" "$W")
else
  W=${SHELLDON_VM_WORKDIR:-/var/tmp/shelldon-vm} KERNEL=vmlinuz
  BUILD=("$VM/build.sh" "$REPO" "$W")
fi

head_commit=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)
image_commit=$(git -C "$W/root/root/shelldon" rev-parse HEAD 2>/dev/null || echo none)
if [ -n "$(git -C "$REPO" status --porcelain --untracked-files=no -- tests/system)" ]; then
  echo "run-vm.sh: note: uncommitted changes in tests/system are not in the VM (commit first)"
fi

# build.sh names its download rootfs.tar.new, which mmdebstrap 1.3 takes for a directory; the
# rename then leaves a directory where build.sh wants a tarball. Pack it so build.sh can go on.
pack_rootfs() {
  if [ -d "$W/rootfs.tar" ]; then
    echo "run-vm.sh: packing the directory $W/rootfs.tar into a tarball for build.sh"
    tar --numeric-owner --xattrs -C "$W/rootfs.tar" -cf "$W/rootfs.tar.packed" .
    rm -rf "$W/rootfs.tar"
    mv "$W/rootfs.tar.packed" "$W/rootfs.tar"
  fi
}

build_s=0
if [ "$REBUILD" = 1 ] || [ ! -s "$W/$KERNEL" ] || [ ! -d "$W/root" ] \
  || [ "$image_commit" != "$head_commit" ]; then
  echo "run-vm.sh: building the VM image in $W from $REPO at ${head_commit:0:12} (image had ${image_commit:0:12})"
  started=$SECONDS
  pack_rootfs
  if ! "${BUILD[@]}"; then
    [ -d "$W/rootfs.tar" ] || exit 1
    pack_rootfs
    "${BUILD[@]}"
  fi
  build_s=$((SECONDS - started))
fi

# Inside the VM: root, cwd /root/shelldon (the clone), .venv with .[dev]. -vv because
# pyproject's addopts has -q; -rA shows what each test printed (its measurements); no colour
# codes in a log read on the serial console.
inner='t0=$(date +%s.%N)
SHELLDON_SYSTEM_TESTS=1 .venv/bin/python -m pytest '"$TESTS"' -vv -rA --durations=0 --color=no '"${MARK[*]}"' </dev/null
rc=$?
echo "SYSTEM-SUITE-SECONDS $(awk -v a="$t0" -v b="$(date +%s.%N)" "BEGIN { printf \"%.0f\", b - a }")"
exit $rc'
# run.sh's boot with the board's memory and a kernel command line of our own (run.sh offers
# neither): 512 MB; on arm64 the Pi's core (Cortex-A53) and no Landlock in the LSM list, as
# Raspberry Pi OS's kernel; with --memory-off the memory controller off as a stock Raspberry Pi
# kernel has it. 2 vCPUs (the Pi has 4 cores): this host has 2 to share.
boot_own() {
  printf '%q ' "$@" >"$W/root/root/vm-command"
  rm -f "$W/disk.img"; truncate -s 6G "$W/disk.img"; mkfs.ext4 -q -F -d "$W/root" "$W/disk.img"
  local off="" qemu
  [ "$MEMORY_OFF" = 1 ] && off=" cgroup_disable=memory"
  if [ "$ARCH" = arm64 ]; then
    qemu=(qemu-system-aarch64 -M virt -cpu cortex-a53
      -append "root=/dev/vda rw console=ttyAMA0 quiet systemd.show_status=0 lsm=lockdown,capability,yama,apparmor$off")
  else
    qemu=(qemu-system-x86_64 -cpu max
      -append "root=/dev/vda rw console=ttyS0 edd=off quiet systemd.show_status=0$off")
  fi
  timeout "${SHELLDON_VM_TIMEOUT:-5400}" "${qemu[@]}" -accel tcg,thread=multi \
    -smp 2 -m 512 -nographic -no-reboot -nic none -kernel "$W/$KERNEL" -initrd "$W/initrd" \
    -drive file="$W/disk.img",if=virtio,format=raw >"$W/serial.log" 2>&1 || true
  tr -d '\r' <"$W/serial.log" | sed -n '/VM-START$/,/^VM-EXIT rc=/p' | sed '1d'
  local code
  code=$(tr -d '\r' <"$W/serial.log" | sed -n 's/^VM-EXIT rc=\([0-9]*\)$/\1/p' | tail -1)
  [ -n "$code" ] || { echo "the VM did not finish the command; see $W/serial.log"; return 124; }
  return "$code"
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
started=$SECONDS
set +e
if [ "$MEMORY_OFF" = 1 ] || [ "$ARCH" = arm64 ]; then
  boot_own bash -c "$inner" | tee "$log"
else
  "$VM/run.sh" "${PI[@]}" --workdir "$W" --timeout "${SHELLDON_VM_TIMEOUT:-5400}" -- bash -c "$inner" \
    | tee "$log"
fi
rc=${PIPESTATUS[0]}
set -e
run_s=$((SECONDS - started))
suite_s=$(sed -n 's/^SYSTEM-SUITE-SECONDS \([0-9]*\)$/\1/p' "$log" | tail -1)
echo "run-vm.sh: $ARCH, ${PI[*]:-default kernel}${MARK[*]:+, smoke}${OFF}: build ${build_s} s, boot + suite ${run_s} s" \
  "(suite ${suite_s:-?} s, so boot and power-off ~$((run_s - ${suite_s:-0})) s); exit $rc"
exit "$rc"
