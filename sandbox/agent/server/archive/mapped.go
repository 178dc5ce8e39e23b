package archive

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// writableMappings returns the inodes some process of the sandbox maps shared and
// writable. A write through such a mapping to a page already dirty changes the file
// without changing its mtime or ctime (they change when a clean page is first written),
// so a capture never vouches for such a file by its times: it is always sent whole.
// The agent shares the sandbox's PID namespace, so /proc lists every process there.
func writableMappings() map[uint64]bool {
	out := map[uint64]bool{}
	maps, _ := filepath.Glob("/proc/[0-9]*/maps")
	for _, p := range maps {
		f, err := os.Open(p)
		if err != nil {
			continue // gone, or not ours to read
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if ino, ok := sharedWritable(sc.Bytes()); ok {
				out[ino] = true
			}
		}
		f.Close()
	}
	return out
}

// sharedWritable parses one line of /proc/PID/maps ("address perms offset dev inode
// path") and reports the inode of a shared, writable file mapping.
func sharedWritable(line []byte) (uint64, bool) {
	f := bytes.Fields(line)
	if len(f) < 5 || len(f[1]) < 4 || f[1][1] != 'w' || f[1][3] != 's' {
		return 0, false
	}
	ino, err := strconv.ParseUint(string(f[4]), 10, 64)
	if err != nil || ino == 0 {
		return 0, false
	}
	return ino, true
}
