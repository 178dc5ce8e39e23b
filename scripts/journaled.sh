# journaled.sh — sourced by deps.sh and kube.sh: keep a directory of workspace volumes
# on a journaled file system.
#
# On ext4 without a journal (this project's VMs: /sys/fs/ext4/<dev>/journal_task reads
# "<none>") the kernel skips every inode freed in the last 30-330 s when it allocates
# one (recently_deleted in fs/ext4/ialloc.c), with a buffer lookup each, so creating
# files after deleting many gets slower with every file: a 2,000-file tar -x took 45 ms
# on a fresh tree and 360-760 ms after a churn, and 40-53 ms on a journaled ext4 after
# the same churn. Wakes, restores and forks create thousands of files right after
# others went, so the workspace volumes go on a journaled ext4 kept in a file (loop).
# CWS_VOLUMES_FS=host keeps them where they are.

# journal_less DIR: true when DIR sits on ext4 without a journal.
journal_less() {
	local fstype src
	read -r fstype src < <(findmnt -no FSTYPE,SOURCE -T "$1")
	[ "$fstype" = ext4 ] || return 1
	src=${src%%\[*}
	[ "$(cat "/sys/fs/ext4/$(basename "$src")/journal_task" 2>/dev/null)" = "<none>" ]
}

# journaled DIR IMG SAY: mount a journaled ext4 kept in IMG over DIR when DIR is on
# ext4 without a journal, moving what DIR holds into it; nothing when DIR is a mount
# point already, or CWS_VOLUMES_FS=host. Whoever writes DIR must be stopped. SAY is
# the caller's logging function.
journaled() {
	local dir=$1 img=$2 say=$3
	[ "${CWS_VOLUMES_FS:-}" = host ] && return 0
	mkdir -p "$dir"
	mountpoint -q "$dir" && return 0
	journal_less "$dir" || return 0
	$say "$dir is on ext4 without a journal, where creating files after deleting many is slow: mounting a journaled ext4 kept in $img there (CWS_VOLUMES_FS=host: leave it)"
	if [ ! -e "$img" ]; then
		local avail size
		avail=$(df -B1G --output=avail "$(dirname "$img")" 2>/dev/null | tail -1 | tr -d ' ') || avail=0
		[ -n "$avail" ] || avail=0
		size=$((avail * 3 / 4))
		[ "$size" -gt 64 ] && size=64
		if [ "$size" -lt 4 ]; then
			$say "only ${avail}G free beside $img: leaving $dir as it is"
			return 0
		fi
		mkdir -p "$(dirname "$img")"
		truncate -s "${size}G" "$img.new"
		mkfs.ext4 -q -F -m 0 "$img.new"
		mv "$img.new" "$img"
	else
		e2fsck -p "$img" >/dev/null 2>&1 || true
	fi
	# What DIR holds moves in (the first time: volumes made before; after an unmount:
	# what was written meanwhile).
	local tmp
	tmp=$(mktemp -d)
	mount -o loop "$img" "$tmp"
	if [ -n "$(ls -A "$dir")" ]; then
		cp -a "$dir/." "$tmp/" && find "$dir" -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system {} +
	fi
	umount "$tmp"
	rmdir "$tmp"
	mount -o loop,discard "$img" "$dir"
	# mkfs's lost+found would read as a volume named lost+found to Docker; e2fsck makes
	# it again when it needs one.
	rmdir "$dir/lost+found" 2>/dev/null || true
}
