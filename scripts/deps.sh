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

# Workspace volumes on a journaled file system. On ext4 without a journal (this
# project's VMs: /sys/fs/ext4/<dev>/journal_task is "<none>") the kernel skips every
# inode freed in the last 30-330 s when it allocates one, with a buffer lookup each:
# creating files after deleting many gets slower with every file (a 2,000-file tar -x:
# 45 ms fresh, 360-760 ms after a churn). Wakes, restores and forks do exactly that, so
# the volumes go on a journaled ext4 in a file (loop), where the check does not run.
# CWS_VOLUMES_FS=host keeps them where Docker puts them.
volumes_fs() {
	local vol=/var/lib/docker/volumes img=${CWS_VOLUMES_IMAGE:-/var/lib/cws/docker-volumes.ext4}
	[ "${CWS_VOLUMES_FS:-}" = host ] && return 0
	as_root mkdir -p "$vol"
	mountpoint -q "$vol" && return 0
	local fstype src dev
	read -r fstype src < <(findmnt -no FSTYPE,SOURCE -T "$vol")
	[ "$fstype" = ext4 ] || return 0
	dev=$(basename "${src%%\[*}")
	[ "$(cat "/sys/fs/ext4/$dev/journal_task" 2>/dev/null)" = "<none>" ] || return 0
	say "workspace volumes: $vol is on ext4 without a journal ($src), slow to create files after deletes; mounting a journaled ext4 ($img) there (CWS_VOLUMES_FS=host: keep it as is)"
	if [ ! -e "$img" ]; then
		local avail size
		avail=$(df -B1G --output=avail "$(dirname "$vol")" | tail -1 | tr -d ' ')
		size=$((avail * 3 / 4)); [ "$size" -gt 64 ] && size=64
		[ "$size" -ge 4 ] || { say "workspace volumes: only ${avail}G free, keeping them on $src" >&2; return 0; }
		as_root mkdir -p "$(dirname "$img")"
		as_root truncate -s "${size}G" "$img.new"
		as_root mkfs.ext4 -q -F -m 0 "$img.new"
		# Volumes made before (their data and Docker's metadata.db) move in with it.
		local tmp; tmp=$(mktemp -d)
		as_root mount -o loop "$img.new" "$tmp"
		as_root cp -a "$vol/." "$tmp/"
		as_root umount "$tmp"; rmdir "$tmp"
		as_root mv "$img.new" "$img"
	else
		as_root e2fsck -p "$img" >/dev/null 2>&1 || true
	fi
	as_root mount -o loop,discard "$img" "$vol"
}

# A dockerd killed without a clean shutdown leaves its pid file and containerd's
# sockets behind; the next dockerd then hangs on "containerd.sock: timeout".
# Clear them, but only when no dockerd/containerd is actually running.
if ! pgrep -x dockerd >/dev/null 2>&1; then
	if [ -e /var/run/docker.pid ] || [ -d /var/run/docker/containerd ]; then
		say "clearing stale dockerd state (/var/run/docker.pid, /var/run/docker/containerd)"
		pkill -x containerd >/dev/null 2>&1 || true
		as_root rm -rf /var/run/docker.pid /var/run/docker/containerd /var/run/docker.sock
	fi
	volumes_fs
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
