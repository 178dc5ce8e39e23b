package docker

import (
	"os"
	"path/filepath"
	"testing"
)

func TestJournalLess(t *testing.T) {
	sys := t.TempDir()
	for dev, task := range map[string]string{"vda": "<none>\n", "loop0": "24330\n", "sdb1": "<none>\n"} {
		if err := os.MkdirAll(filepath.Join(sys, dev), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sys, dev, "journal_task"), []byte(task), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mountinfo := []byte(`22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
42 27 254:0 /var/lib/docker /var/lib/docker rw,relatime shared:1 - ext4 /dev/vda rw,discard
50 42 7:0 / /var/lib/docker/volumes rw,relatime shared:2 - ext4 /dev/loop0 rw,discard
51 22 8:17 / /srv/my\040disk rw,relatime - ext4 /dev/sdb1 rw
52 22 0:40 / /srv/fast rw,relatime - xfs /dev/sdc rw
53 22 0:41 / /srv/tmp rw shared:3 master:1 - tmpfs tmpfs rw
54 22 8:33 / /srv/gone rw - ext4 /dev/sdd rw
not a mount line
`)
	for _, c := range []struct {
		dir, src string
		slow     bool
	}{
		{"/var/lib/docker/volumes", "/dev/loop0", false}, // the journaled loop mounted over it
		{"/var/lib/docker/volumes/x/_data", "/dev/loop0", false},
		{"/var/lib/docker/volumesx", "/dev/vda", true}, // a sibling, not below the mount
		{"/var/lib/docker", "/dev/vda", true},
		{"/home/u", "/dev/vda", true},
		{"/srv/my disk/volumes", "/dev/sdb1", true}, // an escaped space in the mount point
		{"/srv/fast/volumes", "", false},            // not ext4
		{"/srv/tmp/volumes", "", false},
		{"/srv/gone/volumes", "", false}, // no sysfs entry: can't tell, say nothing
	} {
		src, slow := journalLess(mountinfo, sys, c.dir)
		if slow != c.slow || (slow && src != c.src) {
			t.Errorf("journalLess(%q) = %q, %v; want %q, %v", c.dir, src, slow, c.src, c.slow)
		}
	}
	if src, slow := journalLess(nil, sys, "/x"); slow || src != "" {
		t.Errorf("no mounts: %q, %v", src, slow)
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
