package fs

import "github.com/cwsdev/cws/sandbox/agent/guard"

// Handlers serves the file operations on a Workspace.
type Handlers struct {
	WS *Workspace
	// Wrote, if set, is told of each successful write (rel is the file) or upload (rel
	// is the directory it went into, dir set), under the writer's guard. It must return
	// at once.
	Wrote func(rel string, g *guard.Guard, dir bool)
}

func (h *Handlers) wrote(rel string, g *guard.Guard, dir bool) {
	if h.Wrote != nil {
		h.Wrote(rel, g, dir)
	}
}
