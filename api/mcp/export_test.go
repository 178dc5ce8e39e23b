package mcp

// LeanServed is how many requests h answered on the lean path.
func LeanServed(h *Handler) int64 { return h.leanServed.Load() }

// AppendString is the lean path's JSON string encoder.
func AppendString[S []byte | string](dst []byte, s S) []byte { return appendString(dst, s) }
