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
#
# The file is kept whole (allocated, never sparse): a sparse one would promise room the
# host may not have, and a write that found none would be lost at writeback, with no
# error to the writer. So: fallocate, mkfs without discards and with its inode tables
# written (lazy init would punch them out through the loop device), holes filled again
# before every mount and on every run, and discards off on the loop device (an fstrim,
# weekly on systemd hosts, would punch out every free block).

# journal_less DIR: true when DIR sits on ext4 without a journal.
journal_less() {
	local fstype majmin dev
	read -r fstype majmin < <(findmnt -no FSTYPE,MAJ:MIN -T "$1") || return 1
	[ "$fstype" = ext4 ] || return 1
	# /sys/fs/ext4 names the kernel's block device (dm-0, not /dev/mapper/vg-lv).
	dev=$(basename "$(readlink -f "/sys/dev/block/$majmin")") || return 1
	[ "$(cat "/sys/fs/ext4/$dev/journal_task" 2>/dev/null)" = "<none>" ]
}

# keep_whole IMG SAY [DIR]: fill IMG's holes (an image of an older journaled.sh, or one
# trimmed since), or say that it can't, and, when DIR is mounted from it, turn discards
# off on its loop device.
keep_whole() {
	local img=$1 say=$2 dir=${3:-} dev
	fallocate -l "$(stat -c %s "$img")" "$img" 2>/dev/null ||
		$say "could not allocate all of $img (is the host full?): what its file system holds beyond the host's room may be lost; free some space and run this again"
	[ -n "$dir" ] || return 0
	dev=$(findmnt -fno SOURCE "$dir") || return 0
	case $dev in
	/dev/loop*) echo 0 >"/sys/block/${dev#/dev/}/queue/discard_max_bytes" 2>/dev/null || true ;;
	esac
}

# journaled DIR IMG SAY [BUSY]: mount a journaled ext4 kept in IMG over DIR when DIR is
# on ext4 without a journal. The first time, IMG is made (a third of the free space, at
# most 32 GiB, and at least twice what DIR holds plus 2 GiB, or nothing is done) and
# what DIR holds is copied into it, then removed from under it. Nothing is done when
# DIR is a mount point already, CWS_VOLUMES_FS=host, processes matching the pgrep -f
# pattern BUSY run (they may have DIR's files open or mounted), or both DIR and an IMG
# from before hold files (it says how to merge them). JOURNALED_MIN_MIB (2048) is the
# room an image gets beyond twice DIR's size, at least (tests make small ones). It fails only when IMG exists
# and can't be mounted: DIR's files from before are in it. SAY is the caller's logger.
# With JOURNALED_FSTAB=1 it also adds IMG to /etc/fstab (nofail), so that a dockerd
# started at boot finds the volumes where they were.
journaled() {
	local dir=$1 img=$2 say=$3 busy=${4:-}
	[ "${CWS_VOLUMES_FS:-}" = host ] && return 0
	mkdir -p "$dir"
	if mountpoint -q "$dir"; then
		# Ours from a run before: kept whole.
		if [ -e "$img" ] && [ "$(findmnt -fno SOURCE "$dir" | xargs -r losetup -nO BACK-FILE 2>/dev/null)" = "$(readlink -f "$img")" ]; then
			keep_whole "$img" "$say" "$dir"
		fi
		return 0
	fi
	journal_less "$dir" || return 0
	if [ -n "$busy" ] && pgrep -f -- "$busy" >/dev/null 2>&1; then
		$say "$dir is on ext4 without a journal (slow to create files after deletes), but processes that may use it run ($busy): left as it is; stop them and run this again"
		return 0
	fi
	local full=""
	[ -n "$(ls -A "$dir")" ] && full=1
	if [ -e "$img" ] && [ -n "$full" ]; then
		$say "$dir holds files, and so may $img (not mounted; volumes from before): both left as they are, $dir in use. To merge: stop what uses $dir, mount $img elsewhere (mount -o loop), move $dir's files into it with care for what both hold, empty $dir, and run this again"
		return 0
	fi
	$say "$dir is on ext4 without a journal, where creating files after deleting many is slow: mounting a journaled ext4 kept in $img there (CWS_VOLUMES_FS=host: leave it)"
	local tmp=""
	if [ ! -e "$img" ]; then
		mkdir -p "$(dirname "$img")"
		local avail need size
		avail=$(df -B1M --output=avail "$(dirname "$img")" | tail -1 | tr -d ' ')
		need=$(du -sm "$dir" | cut -f1)
		size=$((avail / 3))
		[ "$size" -gt 32768 ] && size=32768
		if [ "$size" -lt $((need * 2 + ${JOURNALED_MIN_MIB:-2048})) ]; then
			$say "only ${avail} MiB free beside $img for $dir's ${need} MiB: left as it is"
			return 0
		fi
		rm -f "$img.new"
		if ! fallocate -l "${size}M" "$img.new" ||
			! mkfs.ext4 -q -F -m 0 -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 "$img.new"; then
			rm -f "$img.new"
			$say "could not make $img: $dir left as it is"
			return 0
		fi
		# Mounted once aside first, contents or not: a host that can't mount it (no loop
		# devices) keeps DIR as it is, and no image is left to stand in its way.
		tmp=$(mktemp -d)
		if ! mount -o loop "$img.new" "$tmp"; then
			rmdir "$tmp"
			rm -f "$img.new"
			$say "could not mount a loop file here: $dir left as it is"
			return 0
		fi
		if [ -n "$full" ] && ! cp -a "$dir/." "$tmp/"; then
			umount "$tmp"
			rmdir "$tmp"
			rm -f "$img.new"
			$say "copying $dir into $img failed: $dir left as it is"
			return 0
		fi
		umount "$tmp"
		rmdir "$tmp"
		mv "$img.new" "$img"
		# The image and its name on disk before the originals go (the host has no
		# journal to order them): those two, not every file system's dirty pages.
		sync "$img" "$(dirname "$img")"
		# Its files are in the image now; what stays underneath would only be hidden.
		[ -z "$full" ] || find "$dir" -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system {} +
	else
		local rc=0 out
		out=$(e2fsck -p "$img" 2>&1) || rc=$?
		if [ "$rc" -ge 4 ]; then
			$say "$img (the journaled file system of $dir, holding its files from before) has errors e2fsck -p could not repair (exit $rc):"
			printf '%s\n' "$out" >&2
			$say "nothing mounted. Repair it (e2fsck -f $img), or move it aside to start an empty one, then run this again"
			return 1
		fi
	fi
	keep_whole "$img" "$say"
	if ! mount -o loop "$img" "$dir"; then
		$say "mounting $img on $dir failed (it holds $dir's files from before): nothing mounted. See dmesg; move $img aside to start an empty one"
		return 1
	fi
	# mkfs's lost+found would read as a volume named lost+found to Docker; e2fsck makes
	# it again when it needs one.
	rmdir "$dir/lost+found" 2>/dev/null || true
	keep_whole "$img" "$say" "$dir"
	if [ "${JOURNALED_FSTAB:-}" = 1 ] && [ -w /etc/fstab ] && ! grep -qF " $dir ext4 " /etc/fstab; then
		printf '%s %s ext4 loop,nofail,x-systemd.before=docker.service 0 0 # cws (scripts/journaled.sh)\n' "$img" "$dir" >>/etc/fstab
	fi
}
