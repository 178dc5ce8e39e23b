package archive

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// writableMappings returns the inodes some process of the sandbox maps shared and
// writable. A write through such a mapping to a page already dirty changes the file
// without changing its mtime or ctime (they change when a clean page is first written),
// so a capture never vouches for such a file by its times: it is always sent whole.
// The agent shares the sandbox's PID namespace, so /proc lists every process there.
// ok is false when some process's mappings could not be read (one made itself not
// dumpable, and the agent has no CAP_SYS_PTRACE): then no file may be vouched for.
// The sandbox's init (PID 1, cws's launcher) is cws's own and maps no workspace
// file: it is not read.
func writableMappings() (map[uint64]bool, bool) { return writableMappingsIn("/proc") }

func writableMappingsIn(proc string) (map[uint64]bool, bool) {
	out := map[uint64]bool{}
	seen := map[string]bool{}
	seen[filepath.Join(proc, "1", "maps")] = true
	// Until no new process shows up: one forked while the list was read, whose parent
	// is gone by the time it is read, would otherwise be missed.
	for range 4 {
		maps, _ := filepath.Glob(filepath.Join(proc, "[0-9]*", "maps"))
		slices.Sort(maps)
		fresh := 0
		for _, p := range maps {
			if seen[p] {
				continue
			}
			seen[p], fresh = true, fresh+1
			if !readMappings(p, out) {
				return nil, false
			}
		}
		if fresh == 0 {
			return out, true
		}
	}
	return nil, false // processes keep coming: vouch for nothing this time
}

// readMappings adds the shared writable file mappings of one maps file to out; false
// when they could not be read (a process that is gone is not an error).
func readMappings(p string, out map[uint64]bool) bool {
	f, err := os.Open(p)
	if err != nil {
		return gone(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if ino, ok := sharedWritable(sc.Bytes()); ok {
			out[ino] = true
		}
	}
	return sc.Err() == nil || gone(sc.Err())
}

func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
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
