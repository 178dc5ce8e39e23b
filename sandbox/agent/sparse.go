package agent

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSparse reads a sparse map (TarSparse) of a file holding data bytes of data, in
// at most max segments: each segment's offset and length, in order, within the
// apparent size it returns, holding exactly data bytes. The agent restores by it, and
// the snapshot store checks it before it records a capture.
func ParseSparse(raw string, data int64, max int) ([][2]int64, int64, error) {
	parts := strings.Split(raw, ",")
	if len(parts) > max+2 {
		return nil, 0, fmt.Errorf("sparse map of %d segments", len(parts))
	}
	var segs [][2]int64
	var end, total int64
	for i, p := range parts {
		o, l, ok := strings.Cut(p, ":")
		off, err1 := strconv.ParseInt(o, 10, 64)
		n, err2 := strconv.ParseInt(l, 10, 64)
		if !ok || err1 != nil || err2 != nil || off < end || n < 0 || off > 1<<62 || n > 1<<62 {
			return nil, 0, fmt.Errorf("bad sparse map %q", raw)
		}
		if i == len(parts)-1 {
			if n != 0 || total != data {
				return nil, 0, fmt.Errorf("bad sparse map %q for %d bytes of data", raw, data)
			}
			return segs, off, nil
		}
		segs = append(segs, [2]int64{off, n})
		end, total = off+n, total+n
	}
	return nil, 0, fmt.Errorf("bad sparse map %q", raw)
}
