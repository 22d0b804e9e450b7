#!/usr/bin/env bash
# Remove what deploy/install.sh installed.
#
#   sudo deploy/uninstall.sh                 stop and remove the service, its code and command;
#                                            keep the pet's home, config and credentials
#   sudo deploy/uninstall.sh --purge         also delete /var/lib/shelldon, /etc/shelldon and
#                                            the shelldon user (the pet's memory and tools are gone)
#   deploy/uninstall.sh --prefix DIR [...]   the same inside a scratch root (CI); user removal
#                                            and systemctl calls are recorded, not run
set -euo pipefail

PREFIX=""
PURGE=0
SERVICE_USER=shelldon

while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) PREFIX=${2:?--prefix needs a directory}; shift 2 ;;
    --prefix=*) PREFIX=${1#--prefix=}; shift ;;
    --purge) PURGE=1; shift ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "uninstall.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ -n "$PREFIX" ]; then
  PREFIX=$(cd "$PREFIX" && pwd)
elif [ "$(id -u)" != 0 ]; then
  echo "uninstall.sh: run it as root (sudo), or with --prefix DIR" >&2
  exit 1
fi

ACTIONS=$PREFIX/install-actions.log
act() {
  if [ -n "$PREFIX" ]; then
    echo "$*" >>"$ACTIONS"
  else
    "$@"
  fi
}

[ -n "$PREFIX" ] && : >"$ACTIONS"

if [ -n "$PREFIX" ] || systemctl list-unit-files shelldon.service >/dev/null 2>&1; then
  act systemctl disable --now shelldon.service
fi
rm -f "$PREFIX/etc/systemd/system/shelldon.service" \
  "$PREFIX/etc/systemd/journald.conf.d/shelldon.conf" \
  "$PREFIX/usr/local/bin/shelldon"
rm -rf "$PREFIX/opt/shelldon"
act systemctl daemon-reload
act systemctl try-restart systemd-journald

if [ "$PURGE" = 1 ]; then
  rm -rf "$PREFIX/var/lib/shelldon" "$PREFIX/etc/shelldon"
  if [ -n "$PREFIX" ] || id "$SERVICE_USER" >/dev/null 2>&1; then
    act userdel "$SERVICE_USER"
  fi
  echo "shelldon removed, with its home, config and credentials."
else
  echo "shelldon removed; kept ${PREFIX}/var/lib/shelldon, ${PREFIX}/etc/shelldon" \
    "(uninstall.sh --purge deletes them)."
fi
