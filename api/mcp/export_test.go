package mcp

// LeanServed is how many requests h answered on the lean path.
func LeanServed(h *Handler) int64 { return h.leanServed.Load() }
