package docker

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Where the workspace volumes live matters to every wake, restore and fork: they
// create thousands of files, often right after others were deleted. On ext4 without
// a journal the kernel skips every inode freed in the last 30-330 s when it picks one
// (recently_deleted in fs/ext4/ialloc.c), one buffer lookup each, so each new file
// costs more than the last: a 2,000-file tar -x took 45 ms on a fresh tree and
// 360-760 ms after a churn on this project's VMs, and 40-53 ms on a journaled ext4 after
// the same churn. With a journal the check does not run.

// VolumeFS is what the file system under Docker's workspace volumes is known to be.
type VolumeFS int

const (
	VolumeFSUnknown VolumeFS = iota // not visible from here (a remote engine, cws in a container), or not told
	VolumeFSFine                    // not ext4 without a journal
	VolumeFSSlow                    // ext4 without a journal: see above
)

// CheckVolumeFS says what the file system under Docker's workspace volumes is (root is
// the engine's DockerRootDir), with a warning to log when it is VolumeFSSlow.
func CheckVolumeFS(root string) (VolumeFS, string) {
	if root == "" {
		return VolumeFSUnknown, ""
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return VolumeFSUnknown, ""
	}
	dir := filepath.Join(root, "volumes")
	if _, err := os.Stat(dir); err != nil {
		return VolumeFSUnknown, ""
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	src, state := journalLess(mounts, "/sys/dev/block", "/sys/fs/ext4", dir)
	if state != VolumeFSSlow {
		return state, ""
	}
	return state, fmt.Sprintf("workspace volumes (%s) are on ext4 without a journal (%s): creating files after deleting many gets slower with each file, which slows wakes, restores and forks", dir, src) +
		"; " + VolumeFSHint(dir)
}

// VolumeFSHint is what to do about a VolumeFSSlow.
func VolumeFSHint(dir string) string {
	return "put them on a journaled file system: mount one at " + dir + " before dockerd starts (`make deps` does it with a loop file), or add a journal to that ext4 while it is unmounted (tune2fs -j)"
}

// journalLess finds the mount holding dir in a /proc/self/mountinfo text and says
// whether it is ext4 without a journal. sysExt4 (/sys/fs/ext4) tells, under the
// kernel's name of the block device (dm-0 for /dev/mapper/vg-lv, vda for /dev/root),
// which sysDevBlock (/sys/dev/block) gives for the mount's major:minor: the
// journal_task of a file system without a journal reads "<none>".
func journalLess(mountinfo []byte, sysDevBlock, sysExt4, dir string) (source string, state VolumeFS) {
	var best, fstype, majmin string
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
		f := strings.Fields(sc.Text())
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || len(f) < sep+3 {
			continue
		}
		mp := unescapeMount(f[4])
		if !within(dir, mp) || len(mp) < len(best) {
			continue
		}
		best, majmin, fstype, source = mp, f[2], f[sep+1], unescapeMount(f[sep+2])
	}
	switch {
	case best == "":
		return "", VolumeFSUnknown
	case fstype != "ext4":
		return source, VolumeFSFine
	}
	link, err := os.Readlink(path.Join(sysDevBlock, majmin))
	if err != nil {
		return source, VolumeFSUnknown
	}
	task, err := os.ReadFile(path.Join(sysExt4, path.Base(link), "journal_task"))
	if err != nil {
		return source, VolumeFSUnknown
	}
	if strings.TrimSpace(string(task)) == "<none>" {
		return source, VolumeFSSlow
	}
	return source, VolumeFSFine
}

// within says whether dir is mp or below it.
func within(dir, mp string) bool {
	return mp == "/" || dir == mp || strings.HasPrefix(dir, mp+"/")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, \011, \012, \134).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, ok := octal3(s[i+1 : i+4]); ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func octal3(s string) (byte, bool) {
	if len(s) != 3 {
		return 0, false
	}
	v := 0
	for _, c := range s {
		if c < '0' || c > '7' {
			return 0, false
		}
		v = v*8 + int(c-'0')
	}
	if v > 255 {
		return 0, false
	}
	return byte(v), true
}

// warnVolumeFS logs CheckVolumeFS's warning for a local engine, once, in the
// background: New does not wait on the engine for it.
func (d *Driver) warnVolumeFS() {
	if !strings.HasPrefix(d.cli.DaemonHost(), "unix://") {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		info, err := d.cli.Info(ctx)
		if err != nil {
			return
		}
		if _, w := CheckVolumeFS(info.DockerRootDir); w != "" {
			d.log.Warn(w)
		}
	}()
}
