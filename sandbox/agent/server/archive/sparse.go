package archive

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
	"golang.org/x/sys/unix"
)

// Sparse files in an exact archive: the capture reads only the data segments
// (SEEK_DATA/SEEK_HOLE) and the restore writes them at their offsets, so a file of 1 GiB
// apparent size and no data costs nothing on either side. The map travels in the
// agent.TarSparse PAX record.

// segment is a run of data in a sparse file.
type segment struct{ off, len int64 }

// maxSegments bounds a sparse map (a file of alternating holes and data is stored
// dense past it).
const maxSegments = 4096

// dataSegments lists f's data segments (size: its apparent size). A file system
// without SEEK_DATA gives one segment, the whole file.
func dataSegments(f *os.File, size int64) ([]segment, error) {
	fd := int(f.Fd())
	var segs []segment
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			return []segment{{0, size}}, nil
		}
		if err != nil {
			return nil, err
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		hole = min(hole, size)
		if hole > data {
			segs = append(segs, segment{data, hole - data})
		}
		off = hole
		if len(segs) > maxSegments {
			return []segment{{0, size}}, nil
		}
	}
	if _, err := unix.Seek(fd, 0, unix.SEEK_SET); err != nil {
		return nil, err
	}
	return segs, nil
}

// formatSparse writes a sparse map: the segments, then "size:0".
func formatSparse(segs []segment, size int64) string {
	var b strings.Builder
	for _, s := range segs {
		fmt.Fprintf(&b, "%d:%d,", s.off, s.len)
	}
	fmt.Fprintf(&b, "%d:0", size)
	return b.String()
}

// parseSparse reads a sparse map (agent.ParseSparse).
func parseSparse(raw string, data int64) ([]segment, int64, error) {
	segs, size, err := agent.ParseSparse(raw, data, maxSegments)
	if err != nil {
		return nil, 0, err
	}
	out := make([]segment, len(segs))
	for i, sg := range segs {
		out[i] = segment{sg[0], sg[1]}
	}
	return out, size, nil
}
