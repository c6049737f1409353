#!/usr/bin/env bash
# The programs the test suites run that pip cannot install, from Debian's packages when missing.
# The Makefile names them, as PROGRAM:PACKAGE pairs (a PACKAGE with a leading "?" is optional:
# its checks are reduced without it):
#   make test:              redis-server:redis-server chromium:chromium
#                           chromedriver:chromium-driver (tests/gateway/test_dashboard.py drives
#                           Debian's Chromium with selenium; nothing downloads a browser)
#                           node:nodejs npm:npm unshare:util-linux ip:iproute2 (the coding-agent
#                           CLIs from npm, run in a loopback-only network namespace:
#                           tests/clients/test_coding_agents.py)
#   make test-integration:  redis-server:redis-server docker-compose:?docker-compose
# So a fresh machine needs nothing by hand. Whatever is already on the PATH is left alone; a
# required program that cannot be installed stops the run here, with its name, rather than as
# skipped or failing tests later.
set -euo pipefail

progs=()  # required programs that are missing
want=()   # their Debian packages
extra=()  # Debian packages to install if possible
missing() { ! command -v "$1" >/dev/null 2>&1; }
need() { missing "$1" && progs+=("$1") && want+=("$2"); return 0; }

if [ $# -eq 0 ]; then
  echo "usage: system_deps.sh PROGRAM:PACKAGE ... (PACKAGE with a leading ? is optional)" >&2
  exit 2
fi
for pair in "$@"; do
  prog=${pair%%:*}
  pkg=${pair#*:}
  if [ "$prog" = "$pair" ] || [ -z "$prog" ] || [ -z "$pkg" ]; then
    echo "system_deps.sh: '$pair' is not PROGRAM:PACKAGE" >&2
    exit 2
  fi
  case "$pkg" in
    \?*) missing "$prog" && extra+=("${pkg#\?}") ;;
    *) need "$prog" "$pkg" ;;
  esac
done
[ ${#want[@]} -eq 0 ] && [ ${#extra[@]} -eq 0 ] && exit 0

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo=(sudo); fi
fi
if ! command -v apt-get >/dev/null 2>&1 || { [ "$(id -u)" -ne 0 ] && [ ${#sudo[@]} -eq 0 ]; }; then
  if [ ${#want[@]} -gt 0 ]; then
    echo "system_deps.sh: missing ${want[*]}: install them (Debian: apt-get install ${want[*]})" >&2
    exit 1
  fi
  echo "note: ${extra[*]} not installed (no apt-get as root here); its checks are reduced" >&2
  exit 0
fi

echo "installing from Debian's packages: ${want[*]} ${extra[*]}" >&2
"${sudo[@]}" apt-get update -qq
export DEBIAN_FRONTEND=noninteractive
if [ ${#want[@]} -gt 0 ]; then
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
fi
if [ ${#extra[@]} -gt 0 ]; then
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${extra[@]}" >/dev/null \
    || echo "note: could not install ${extra[*]}; its checks are reduced" >&2
fi
for prog in "${progs[@]}"; do
  if missing "$prog"; then
    echo "system_deps.sh: $prog is still missing after apt-get install" >&2
    exit 1
  fi
done
