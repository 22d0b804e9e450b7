#!/usr/bin/env bash
# Install shelldon as a systemd service (Raspberry Pi OS bookworm or any Debian with systemd).
#
#   sudo deploy/install.sh                       install or upgrade; safe to run again
#   sudo deploy/install.sh --credential NAME     store one secret (read from stdin, not echoed)
#   deploy/install.sh --prefix DIR [--skip-venv] write into a scratch root (CI): user creation
#                                                and systemctl calls are recorded, not run
#
# Layout: /opt/shelldon/{src,venv} (code, root-owned, read-only to the service),
# /var/lib/shelldon (the pet's home: workspace, vault, toolbox, sqlite; owned by user shelldon, 0700),
# /etc/shelldon/config.toml (root:shelldon 0640; never overwritten once there),
# /etc/shelldon/credentials/NAME (root 0600; systemd copies them in with LoadCredential=),
# /etc/systemd/system/shelldon.service, /etc/systemd/journald.conf.d/shelldon.conf,
# /usr/local/bin/shelldon (runs the venv's shelldon with the service's home and config).
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=""
SKIP_VENV=0
CREDENTIAL=""
SERVICE_USER=shelldon
CREDENTIALS=(telegram_token anthropic_api_key openai_api_key)

usage() {
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) PREFIX=${2:?--prefix needs a directory}; shift 2 ;;
    --prefix=*) PREFIX=${1#--prefix=}; shift ;;
    --skip-venv) SKIP_VENV=1; shift ;;
    --credential) CREDENTIAL=${2:?--credential needs a name}; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "install.sh: unknown argument $1" >&2; usage 2 ;;
  esac
done

if [ -n "$PREFIX" ]; then
  mkdir -p "$PREFIX"
  PREFIX=$(cd "$PREFIX" && pwd)
elif [ "$(id -u)" != 0 ]; then
  echo "install.sh: run it as root (sudo), or with --prefix DIR to try it out" >&2
  exit 1
fi

OPT=$PREFIX/opt/shelldon
VENV=$OPT/venv
HOME_DIR=$PREFIX/var/lib/shelldon
ETC=$PREFIX/etc/shelldon
CREDS=$ETC/credentials
UNIT=$PREFIX/etc/systemd/system/shelldon.service
JOURNALD=$PREFIX/etc/systemd/journald.conf.d/shelldon.conf
WRAPPER=$PREFIX/usr/local/bin/shelldon
ACTIONS=$PREFIX/install-actions.log

# With --prefix, what would change the machine itself is written down instead of done.
act() {
  if [ -n "$PREFIX" ]; then
    echo "$*" >>"$ACTIONS"
  else
    "$@"
  fi
}

owner() {  # owner USER:GROUP PATH... (root-owned already when run by root)
  local who=$1; shift
  act chown "$who" "$@"
}

store_credential() {
  local name=$1 value=""
  case " ${CREDENTIALS[*]} " in
    *" $name "*) ;;
    *) echo "install.sh: unknown credential $name (one of: ${CREDENTIALS[*]})" >&2; exit 2 ;;
  esac
  install -d -m 0700 "$CREDS"
  if [ -t 0 ]; then
    read -r -s -p "$name: " value
    echo
  else
    IFS= read -r value || true
  fi
  if [ -z "$value" ]; then
    echo "install.sh: empty value, $name left unchanged" >&2
    exit 1
  fi
  # Written under a temporary name with 0600 from the start, then renamed: never readable.
  local tmp
  tmp=$(mktemp "$CREDS/.$name.XXXXXX")
  printf '%s\n' "$value" >"$tmp"
  chmod 0600 "$tmp"
  mv -f "$tmp" "$CREDS/$name"
  echo "stored $name in $CREDS/$name (mode 0600, root only)"
  if [ -z "$PREFIX" ] && systemctl is-active --quiet shelldon; then
    echo "restart to use it: sudo systemctl restart shelldon"
  fi
}

if [ -n "$CREDENTIAL" ]; then
  store_credential "$CREDENTIAL"
  exit 0
fi

[ -n "$PREFIX" ] && : >"$ACTIONS"

# 1. The system user: no login, no home directory of its own beyond the state directory.
if [ -n "$PREFIX" ] || ! id "$SERVICE_USER" >/dev/null 2>&1; then
  act useradd --system --user-group --home-dir /var/lib/shelldon --no-create-home \
    --shell /usr/sbin/nologin --comment "shelldon pet agent" "$SERVICE_USER"
fi

# 2. Code: a copy of the source (the service cannot read /home) and a venv with the package.
install -d -m 0755 "$OPT" "$OPT/src"
if [ "$SRC" != "$OPT/src" ]; then  # run from the installed copy: it is the source already
  rm -rf "$OPT/src.new"
  install -d -m 0755 "$OPT/src.new"
  tar -C "$SRC" --exclude=.git --exclude=.venv --exclude='*.egg-info' --exclude=__pycache__ \
    --exclude=.pytest_cache --exclude=.mypy_cache --exclude=.ruff_cache -cf - . \
    | tar -C "$OPT/src.new" -xf -
  # Replace, not merge: a file deleted upstream must not linger in the installed copy.
  rm -rf "$OPT/src"
  mv "$OPT/src.new" "$OPT/src"
fi
if [ "$SKIP_VENV" = 1 ]; then
  echo "python3 -m venv $VENV" >>"${ACTIONS:-/dev/null}"
  echo "$VENV/bin/pip install $OPT/src" >>"${ACTIONS:-/dev/null}"
else
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet --upgrade "$OPT/src"
  # Same version number, new code (an upgrade from git): reinstall the package itself.
  "$VENV/bin/python" -m pip install --quiet --force-reinstall --no-deps "$OPT/src"
fi

# 3. The pet's home. systemd's StateDirectory= would create it too; doing it here lets
#    `shelldon doctor` check it before the first start.
install -d -m 0700 "$HOME_DIR" "$HOME_DIR/workspace" "$HOME_DIR/vault"
owner "$SERVICE_USER:$SERVICE_USER" "$HOME_DIR" "$HOME_DIR/workspace" "$HOME_DIR/vault"

# 4. Config skeleton, written once: the owner's edits survive every later install.
install -d -m 0755 "$ETC"
if [ ! -e "$ETC/config.toml" ]; then
  cat >"$ETC/config.toml" <<'EOF'
# shelldon configuration (see README "Configuration"). Secrets do NOT go here:
# sudo /opt/shelldon/src/deploy/install.sh --credential telegram_token

[telegram]
# Who may talk to the pet (numeric Telegram user ids); nobody else can. Left empty, the bot
# answers a private message with a code: `sudo shelldon pair CODE` writes the sender here.
allowed_users = []

[brain]
# anthropic (key: anthropic_api_key), openai (any OpenAI-compatible server; key:
# openai_api_key), or scripted (offline demo brain).
provider = "anthropic"
model = "claude-sonnet-4-5"
# base_url = "https://api.z.ai/api/anthropic"
# What the model costs, in US$ per million tokens, so /usage can show the cost (0 = unknown):
# price_in_per_mtok = 3.0
# price_out_per_mtok = 15.0

[limits]
daily_turn_budget = 48
EOF
fi
chmod 0640 "$ETC/config.toml"
owner "root:$SERVICE_USER" "$ETC/config.toml"

# 5. Credentials: root-only. Every name the unit loads must exist (LoadCredential= fails the
#    start otherwise): an empty file means "not set".
install -d -m 0700 "$CREDS"
for name in "${CREDENTIALS[@]}"; do
  if [ ! -e "$CREDS/$name" ]; then
    install -m 0600 /dev/null "$CREDS/$name"
  fi
  chmod 0600 "$CREDS/$name"
done
owner root:root "$CREDS" "${CREDENTIALS[@]/#/$CREDS/}"

# 6. The unit, the journald limits, and the command for the owner.
install -d -m 0755 "$(dirname "$UNIT")" "$(dirname "$JOURNALD")" "$(dirname "$WRAPPER")"
install -m 0644 "$SRC/deploy/shelldon.service" "$UNIT"
install -m 0644 "$SRC/deploy/journald.conf" "$JOURNALD"
cat >"$WRAPPER" <<'EOF'
#!/bin/sh
# shelldon with the service's home and config (installed by deploy/install.sh).
# As root, `shelldon doctor` also sees the credentials the unit loads.
: "${SHELLDON_HOME:=/var/lib/shelldon}"
: "${SHELLDON_CONFIG:=/etc/shelldon/config.toml}"
export SHELLDON_HOME SHELLDON_CONFIG
if [ -z "${CREDENTIALS_DIRECTORY:-}" ] && [ -r /etc/shelldon/credentials ] \
  && [ -x /etc/shelldon/credentials ]; then
  CREDENTIALS_DIRECTORY=/etc/shelldon/credentials
  export CREDENTIALS_DIRECTORY
fi
exec /opt/shelldon/venv/bin/shelldon "$@"
EOF
chmod 0755 "$WRAPPER"

act systemctl daemon-reload
act systemctl try-restart systemd-journald
act systemctl enable shelldon.service

cat <<EOF

shelldon is installed${PREFIX:+ under $PREFIX}. Next:
  1. the bot token from @BotFather:   sudo $OPT/src/deploy/install.sh --credential telegram_token
  2. the model key:                   sudo $OPT/src/deploy/install.sh --credential anthropic_api_key
     (or openai_api_key, with [brain] provider = "openai" in the config)
  3. the [brain] you want:            sudoedit $ETC/config.toml
  4. start it:                        sudo systemctl start shelldon
  5. pair with it: message your bot in Telegram; it answers with a code, then
                                      sudo shelldon pair CODE
  6. check it:                        sudo shelldon doctor
EOF

# A stock Raspberry Pi kernel has the memory cgroup controller off: say what that costs.
if awk '$1 == "memory" && $4 == "0" { off = 1 } END { exit !off }' \
  "${SHELLDON_PROC_CGROUPS:-/proc/cgroups}" 2>/dev/null; then
  cat <<'EOF'

Note: this kernel has the memory cgroup controller off, so the unit's MemoryMax/MemoryHigh
and the per-turn memory cap do nothing; each worker, gate run and tool child is bounded by
RLIMIT_AS only (sized to this board). To turn it on, add cgroup_enable=memory to the one
line of /boot/firmware/cmdline.txt, then reboot.
EOF
fi
