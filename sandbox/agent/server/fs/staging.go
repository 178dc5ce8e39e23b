package fs

import "strings"

// StagingPrefix names the staging directories of uploads at the workspace root (package
// archive). Archive entries may not use it, listings, searches and tar.out leave such
// directories out, and stale ones (from an agent that died mid-upload) are removed by
// the next upload.
const StagingPrefix = ".cws-staging-"

// IsStaging reports whether a workspace-relative real path is, or is inside, an upload's
// staging directory. Tools should not show such paths.
func IsStaging(real string) bool {
	first, _, _ := strings.Cut(real, "/")
	return strings.HasPrefix(first, StagingPrefix)
}
