package docker

import (
	"os"
	"path/filepath"
	"testing"
)

func TestJournalLess(t *testing.T) {
	sys := t.TempDir()
	ext4, block := filepath.Join(sys, "fs/ext4"), filepath.Join(sys, "dev/block")
	// journal_task as the kernel names each device; /sys/dev/block's links to them.
	for dev, task := range map[string]string{"vda": "<none>\n", "loop0": "24330\n", "sdb1": "<none>\n", "dm-0": "<none>\n", "dm-1": "913\n"} {
		if err := os.MkdirAll(filepath.Join(ext4, dev), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ext4, dev, "journal_task"), []byte(task), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(block, 0o755); err != nil {
		t.Fatal(err)
	}
	for majmin, target := range map[string]string{
		"254:0": "../../devices/pci0000:00/0000:00:05.0/virtio2/block/vda",
		"7:0":   "../../devices/virtual/block/loop0",
		"8:17":  "../../devices/pci0000:00/ata1/host0/block/sdb/sdb1",
		"253:0": "../../devices/virtual/block/dm-0",
		"253:1": "../../devices/virtual/block/dm-1",
		"8:33":  "../../devices/pci0000:00/ata1/host0/block/sdc/sdc1", // no ext4 entry
	} {
		if err := os.Symlink(target, filepath.Join(block, majmin)); err != nil {
			t.Fatal(err)
		}
	}
	mountinfo := []byte(`22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/root rw,discard
42 27 254:0 /var/lib/docker /var/lib/docker rw,relatime shared:1 - ext4 /dev/vda rw,discard
50 42 7:0 / /var/lib/docker/volumes rw,relatime shared:2 - ext4 /dev/loop0 rw,discard
51 22 8:17 / /srv/my\040disk rw,relatime - ext4 /dev/sdb1 rw
52 22 0:40 / /srv/fast rw,relatime - xfs /dev/sdc rw
53 22 0:41 / /srv/tmp rw shared:3 master:1 - tmpfs tmpfs rw
54 22 8:33 / /srv/gone rw - ext4 /dev/sdc1 rw
55 22 253:0 / /srv/lvm rw - ext4 /dev/mapper/vg-data rw
56 22 253:1 / /srv/lvmj rw - ext4 /dev/mapper/vg-journaled rw
57 22 9:9 / /srv/nolink rw - ext4 /dev/md9 rw
58 50 7:0 / /var/lib/docker/volumes rw,relatime shared:4 - ext4 /dev/loop0 rw
not a mount line
`)
	for _, c := range []struct {
		dir, src string
		want     VolumeFS
	}{
		{"/var/lib/docker/volumes", "/dev/loop0", VolumeFSFine}, // the journaled loop mounted over it (twice: the later wins)
		{"/var/lib/docker/volumes/x/_data", "/dev/loop0", VolumeFSFine},
		{"/var/lib/docker/volumesx", "/dev/vda", VolumeFSSlow}, // a sibling, not below the mount
		{"/var/lib/docker", "/dev/vda", VolumeFSSlow},
		{"/home/u", "/dev/root", VolumeFSSlow},              // /dev/root: the kernel's name comes from 254:0
		{"/srv/my disk/volumes", "/dev/sdb1", VolumeFSSlow}, // an escaped space in the mount point
		{"/srv/fast/volumes", "/dev/sdc", VolumeFSFine},     // not ext4
		{"/srv/tmp/volumes", "tmpfs", VolumeFSFine},
		{"/srv/lvm/volumes", "/dev/mapper/vg-data", VolumeFSSlow}, // dm-0 in /sys/fs/ext4
		{"/srv/lvmj/volumes", "/dev/mapper/vg-journaled", VolumeFSFine},
		{"/srv/gone/volumes", "/dev/sdc1", VolumeFSUnknown},  // no /sys/fs/ext4 entry: can't tell
		{"/srv/nolink/volumes", "/dev/md9", VolumeFSUnknown}, // no /sys/dev/block link
	} {
		src, state := journalLess(mountinfo, block, ext4, c.dir)
		if state != c.want || src != c.src {
			t.Errorf("journalLess(%q) = %q, %v; want %q, %v", c.dir, src, state, c.src, c.want)
		}
	}
	if src, state := journalLess(nil, block, ext4, "/x"); state != VolumeFSUnknown || src != "" {
		t.Errorf("no mounts: %q, %v", src, state)
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`:     "/a b",
		`/a\011b\012`: "/a\tb\n",
		`/a\134b`:     `/a\b`,
		`/a\04`:       `/a\04`, // cut short: left as is
		`/a\999`:      `/a\999`,
		`/plain`:      "/plain",
		`\`:           `\`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}
