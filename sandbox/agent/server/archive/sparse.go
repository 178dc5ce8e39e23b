package archive

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

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

// parseSparse reads a sparse map, checking that its segments are in order, within the
// apparent size, and hold exactly data bytes.
func parseSparse(raw string, data int64) ([]segment, int64, error) {
	parts := strings.Split(raw, ",")
	if len(parts) > maxSegments+2 {
		return nil, 0, fmt.Errorf("sparse map of %d segments", len(parts))
	}
	var segs []segment
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
		segs = append(segs, segment{off, n})
		end, total = off+n, total+n
	}
	return nil, 0, fmt.Errorf("bad sparse map %q", raw)
}
