#!/usr/bin/env bash
# Build the arm64 (aarch64) Debian bookworm VM disk: the Pi Zero 2W's architecture, with the
# product installed by this checkout's deploy/install.sh. The arm64 twin of ../shared/vm/build.sh
# (which is amd64 only: linux-image-cloud-amd64, console ttyS0); run-vm.sh --arch arm64 calls it.
#
#   tests/system/build-arm64.sh CHECKOUT [WORKDIR]   (as root; WORKDIR default /var/tmp/shelldon-vm-arm64)
#
# mmdebstrap --arch=arm64 installs the packages and the chroot steps run arm64 binaries through
# qemu-user-static (binfmt_misc, registered with the F flag so the chroot needs no copy of it):
# deploy/install.sh's pip picks aarch64 wheels and builds thespian's sdist there, as on a Pi.
# Inside the image, as in build.sh: the installed product, a clone of CHECKOUT at /root/shelldon
# (committed work only) with a .venv holding .[dev], and vm-command.service, which runs
# /root/vm-command after multi-user.target, prints on the serial console (ttyAMA0 on -M virt)
# and powers off. WORKDIR gets Image (uncompressed: qemu-system-aarch64 -kernel wants it so)
# and initrd.
# Needs: apt-get install -y mmdebstrap qemu-user-static binfmt-support qemu-system-arm e2fsprogs
set -euo pipefail
CHECKOUT=$(cd "${1:?usage: build-arm64.sh CHECKOUT [WORKDIR]}" && pwd)
W=${2:-/var/tmp/shelldon-vm-arm64}
mkdir -p "$W"
binfmt=/proc/sys/fs/binfmt_misc
[ -e "$binfmt/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt"
if ! grep -qs '^enabled' "$binfmt/qemu-aarch64"; then
  update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
  grep -qs '^enabled' "$binfmt/qemu-aarch64" || {
    echo "build-arm64.sh: qemu-aarch64 is not registered in binfmt_misc" \
      "(apt-get install -y qemu-user-static binfmt-support)" >&2
    exit 1
  }
fi
PKGS=systemd,systemd-sysv,udev,dbus,python3,python3-venv,python3-pip,git,libseccomp2,iproute2,procps
PKGS=$PKGS,linux-image-arm64,sqlite3,jq,curl,ca-certificates,kmod,sudo
# The initramfs holds only what -M virt needs to mount the root: under qemu-user the default
# (MODULES=most) took ~12 min per run and the kernel package runs it twice; this list, 24 s.
INITRAMFS_LIST='mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/usr/share/initramfs-tools/modules.d"
echo MODULES=list >"$1/etc/initramfs-tools/conf.d/shelldon-vm"
printf "%s\n" virtio_pci virtio_mmio virtio_blk ext4 >"$1/usr/share/initramfs-tools/modules.d/shelldon-vm"'
if [ ! -s "$W/rootfs.tar" ]; then
  # The name ends in .tar: mmdebstrap 1.3 takes a name ending otherwise for a directory.
  mmdebstrap --arch=arm64 --variant=minbase --format=tar --include=$PKGS \
    --setup-hook="$INITRAMFS_LIST" bookworm "$W/rootfs.new.tar" >"$W/mmdebstrap.log" 2>&1 || { tail -20 "$W/mmdebstrap.log"; exit 1; }
  mv "$W/rootfs.new.tar" "$W/rootfs.tar"
fi
R=$W/root
cleanup() {
  for m in etc/ssl/certs/ca-certificates.crt proc sys dev/pts dev; do umount "$R/$m" 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup
rm -rf "$R"; mkdir -p "$R"; tar -xf "$W/rootfs.tar" -C "$R"
echo shelldon-vm-arm64 >"$R/etc/hostname"
# For the install only: this machine's resolver and CA bundle (its route to the registries).
cp /etc/resolv.conf "$R/etc/resolv.conf"
mount --bind /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/certs/ca-certificates.crt"
mount --bind /dev "$R/dev"; mount --bind /dev/pts "$R/dev/pts"
mount -t proc proc "$R/proc"; mount -t sysfs sys "$R/sys"
# A chroot has no running systemd: skip only the calls that need one (enable works offline).
mkdir -p "$R/root/chroot-bin"
printf '#!/bin/sh\ncase "$1" in daemon-reload|try-restart|is-active|restart|start|stop) exit 0;; esac\nexec /usr/bin/systemctl "$@"\n' \
  >"$R/root/chroot-bin/systemctl"
chmod +x "$R/root/chroot-bin/systemctl"
IN="env -i PATH=/root/chroot-bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8"
[ "$(chroot "$R" uname -m)" = aarch64 ] || { echo "build-arm64.sh: the chroot does not run aarch64" >&2; exit 1; }
git clone -q "$CHECKOUT" "$R/root/shelldon"
chroot "$R" $IN bash -c 'cd /root/shelldon && deploy/install.sh' >"$W/install.log" 2>&1 \
  || { echo "deploy/install.sh failed in the arm64 image:"; tail -20 "$W/install.log"; exit 1; }
chroot "$R" $IN bash -c 'cd /root/shelldon && python3 -m venv .venv && .venv/bin/pip install -q -e ".[dev]"' \
  >>"$W/install.log" 2>&1 || { echo "the dev venv failed:"; tail -20 "$W/install.log"; exit 1; }
# What pip chose on aarch64 (wheels, and what it built from an sdist), for the record.
chroot "$R" $IN /opt/shelldon/venv/bin/python -m pip list --format=freeze >"$W/installed.txt" 2>/dev/null || true
cat >"$R/etc/systemd/system/vm-command.service" <<'UNIT'
[Unit]
Description=run /root/vm-command, then power off
After=multi-user.target
[Service]
Type=oneshot
Environment=PYTHONUNBUFFERED=1
WorkingDirectory=/root/shelldon
ExecStart=/bin/bash -c 'echo VM-START; bash /root/vm-command; echo "VM-EXIT rc=$?"; systemctl poweroff'
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyAMA0
TimeoutStartSec=infinity
[Install]
WantedBy=multi-user.target
UNIT
chroot "$R" systemctl enable vm-command.service >/dev/null 2>&1
chroot "$R" systemctl mask serial-getty@ttyAMA0.service getty@tty1.service >/dev/null 2>&1 || true
rm -rf "$R/etc/resolv.conf" "$R/root/chroot-bin"
cleanup; trap - EXIT
kernel=$(ls "$R"/boot/vmlinuz-* | head -1)
if gzip -t "$kernel" 2>/dev/null; then zcat "$kernel" >"$W/Image"; else cp "$kernel" "$W/Image"; fi
cp "$R"/boot/initrd.img-* "$W/initrd"
echo "built $W (install log: $W/install.log)"
