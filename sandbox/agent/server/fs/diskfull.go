package fs

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cwsdev/cws/sandbox/agent"
)

// Rules a full disk names, as the host shows them (data.rule of a -32003).
const (
	RuleDisk     = "disk"     // the workspace's filesystem (its volume, quota or the host's disk) is full
	RuleFileSize = "fileSize" // the sandbox's largest-file limit (RLIMIT_FSIZE)
)

// noSpace turns a write that ran out of room into an error that names the limit it hit.
// The old file is whole: writes go to a temporary file that is renamed into place only
// once it is complete, and removed when it is not.
func (h *Handlers) noSpace(err error, path string, size int) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		what := "the workspace's disk is full"
		if errors.Is(err, syscall.EDQUOT) {
			what = "the workspace's disk quota is used up"
		}
		var st unix.Statfs_t
		if unix.Statfs(h.WS.dir, &st) == nil && st.Blocks > 0 {
			bs := uint64(st.Bsize)
			what += fmt.Sprintf(" (%s: %d MiB, %d MiB free)", h.WS.dir, st.Blocks*bs>>20, st.Bavail*bs>>20)
		}
		return &agent.WireError{Code: agent.CodeTooLarge, Path: path, Rule: RuleDisk,
			Message: fmt.Sprintf("no space left to write %d bytes: %s; the file was left as it was. Delete files to make room, or ask for a larger diskMB limit", size, what)}
	case errors.Is(err, syscall.EFBIG):
		return &agent.WireError{Code: agent.CodeTooLarge, Path: path, Rule: RuleFileSize,
			Message: fmt.Sprintf("%d bytes is over the sandbox's file size limit (fileSizeMB); the file was left as it was", size)}
	}
	return err
}
