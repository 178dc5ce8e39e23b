package server

import (
	"context"
	"encoding/json"
	"io/fs"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
)

// usage sums the workspace's regular files (as lstat sees them: links are not
// followed) without reading them, up to agent.MaxUsageEntries entries.
func (s *Server) usage(ctx context.Context, _ json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var u agent.DiskUsage
	err := fs.WalkDir(s.ws.Root().FS(), ".", func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: skip
		}
		if u.Files++; u.Files >= agent.MaxUsageEntries {
			u.Partial = true
			return fs.SkipAll
		}
		if u.Files%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				u.Bytes += fi.Size()
			}
		}
		return nil
	})
	return u, err
}
