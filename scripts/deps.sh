#!/usr/bin/env bash
# deps.sh — make sure this machine can build, run and test cws.
#
# Installs the Docker engine (Debian docker.io), redis-server, debootstrap, git, a C
# compiler with a static libc (gcc, libc6-dev: bin/cws-launch) and Chromium (the
# console's browser tests) when missing, and starts dockerd when `docker info` fails. Idempotent: quiet when all
# is there, one line per action otherwise.
set -euo pipefail

say() { printf 'deps: %s\n' "$*"; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v git >/dev/null 2>&1 || missing+=(git)
# The native launcher (bin/cws-launch) is C, linked static: a compiler and libc.a.
command -v cc >/dev/null 2>&1 || missing+=(gcc)
[ -n "$(find /usr/lib /usr/lib64 -name libc.a -print -quit 2>/dev/null)" ] || missing+=(libc6-dev)
# The console's browser tests (console/browser_test.go) drive a headless Chromium.
command -v chromium >/dev/null 2>&1 || missing+=(chromium fonts-dejavu-core)
if [ ${#missing[@]} -gt 0 ]; then
	say "installing ${missing[*]} (apt-get)"
	as_root apt-get update -qq
	DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if docker info >/dev/null 2>&1; then
	exit 0
fi

# Docker's volumes (the workspaces) on a journaled file system: see journaled.sh.
# shellcheck source=scripts/journaled.sh
. "$(dirname "$0")/journaled.sh"

# A dockerd killed without a clean shutdown leaves its pid file and containerd's
# sockets behind; the next dockerd then hangs on "containerd.sock: timeout".
# Clear them, but only when no dockerd/containerd is actually running.
if ! pgrep -x dockerd >/dev/null 2>&1; then
	if [ -e /var/run/docker.pid ] || [ -d /var/run/docker/containerd ]; then
		say "clearing stale dockerd state (/var/run/docker.pid, /var/run/docker/containerd)"
		pkill -x containerd >/dev/null 2>&1 || true
		as_root rm -rf /var/run/docker.pid /var/run/docker/containerd /var/run/docker.sock
	fi
	if [ "$(id -u)" -eq 0 ]; then
		# Containers whose dockerd died still have their volumes mounted: not moved
		# from under them. The image goes in /etc/fstab, so that a dockerd started at
		# boot (a systemd unit) finds the volumes where they were.
		JOURNALED_FSTAB=1 journaled /var/lib/docker/volumes "${CWS_VOLUMES_IMAGE:-/var/lib/cws/docker-volumes.ext4}" say 'containerd-shim.* -namespace moby'
	else
		say "not root: Docker's volumes stay where they are (scripts/journaled.sh says why they may not)"
	fi
	say "starting dockerd (log: /var/log/cws-dockerd.log)"
	as_root sh -c 'nohup dockerd >/var/log/cws-dockerd.log 2>&1 &'
fi

for i in $(seq 1 60); do
	if docker info >/dev/null 2>&1; then
		say "dockerd is up ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
		exit 0
	fi
	sleep 1
done
say "dockerd did not come up in 60 s; see /var/log/cws-dockerd.log" >&2
tail -n 20 /var/log/cws-dockerd.log >&2 || true
exit 1
