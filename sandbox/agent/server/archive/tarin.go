package archive

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
	"golang.org/x/sys/unix"
)

// An upload (tar.in) is all or nothing. Every entry is validated as its header arrives,
// before a byte of it is written, and extracted into a staging directory at the
// workspace root (same volume, so the final renames are cheap and never copy). Only when
// the whole archive has been read and accepted is the staged tree merged into place; on
// any refusal the staging directory is removed and the workspace is untouched.
//
// Merge rules. The archive's tree is laid over the workspace: a directory in the archive
// (listed, or implied by the entries beneath it) merges into an existing directory, whose
// other entries stay, and replaces whatever else is at its path (a file, or a symlink:
// the link itself, never its target). Any other entry replaces what is at its path,
// unless that is a directory, which is refused. Below the target directory nothing is
// ever followed: not a symlink from the archive (an entry written through one is a
// traversal), nor one already in the workspace (it is replaced), so the asked and the
// resolved path of an entry only differ by the symlinks in TarInArgs.Path, and the guard
// checks both.
//
// Hard links are materialized as copies of an earlier regular file of the same archive:
// the workspace treats a multiply-linked file as denied wherever a rule denies anything.

const (
	// maxTarMeta bounds the bytes of an archive that are not file contents: headers, PAX
	// records, padding. With file contents bounded by MaxBytes, this bounds the
	// decompressed size of the whole stream (a gzip bomb stops here).
	maxTarMeta = 1 << 30
	// maxTarTrailer bounds what may follow tar's end-of-archive marker (record padding).
	maxTarTrailer = 1 << 20
)

// TarIn extracts the streamed archive into a directory (agent.TarInArgs).
func (h *Handlers) TarIn(ctx context.Context, args json.RawMessage, _ []byte, r *op.Responder) (any, error) {
	var a agent.TarInArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	if r.In == nil {
		return nil, agent.Errorf(agent.CodeInvalid, "", "tar.in needs a streamed body")
	}
	if a.Path == "" {
		a.Path = "."
	}
	res, err := h.extract(ctx, a, &countingReader{r: r.In})
	if err != nil {
		// Stop reading: the rest of the body is discarded as it arrives, and the host stops
		// sending when it gets our answer. Draining it could mean decompressing a bomb.
		if c, ok := r.In.(interface{ CloseWithError(error) error }); ok {
			_ = c.CloseWithError(errors.New("tar.in refused the archive"))
		}
		return nil, err
	}
	if rel, err := h.WS.Clean(a.Path); err == nil {
		if h.Wrote != nil {
			h.Wrote(rel, a.Guard, true)
		}
	}
	return res, nil
}

// entryKind is what an archive path holds, as far as the archive has said.
type entryKind uint8

const (
	kindImplied entryKind = iota + 1 // a directory implied by entries beneath it
	kindDir
	kindFile // a regular file, or a hard link (materialized as a copy)
	kindSymlink
)

// extraction is one tar.in in progress.
type extraction struct {
	h       *Handlers
	g       *guard.Guard
	max     int64
	base    fs.Target                // the directory extracted into
	stage   string                   // the staging directory, workspace-relative
	kinds   map[string]entryKind     // archive paths (relative to base) seen so far
	sizes   map[string]int64         // the regular files' sizes, for hard links
	ws      map[string]iofs.FileMode // what the workspace holds at archive paths; absent: modeAbsent
	entries int
	content int64 // file contents read from the stream
	res     agent.TarResult
	exact   bool      // agent.TarInArgs.Exact
	st      *stager   // exact: creates the staged entries
	dirs    []dirMeta // exact: the directories' modes and mtimes, set once all is in place
}

// dirMeta is a directory's mode and mtime, applied after the merge (which changes the
// mtimes of the directories it moves entries into).
type dirMeta struct {
	name  string
	mode  int64
	mtime time.Time
}

// modeAbsent marks an archive path with nothing under it in the workspace.
const modeAbsent = iofs.ModeIrregular | iofs.ModeTemporary

func (h *Handlers) extract(ctx context.Context, a agent.TarInArgs, in *countingReader) (agent.TarResult, error) {
	base, err := h.WS.Open(a.Path, a.Guard, true)
	if err != nil {
		return agent.TarResult{}, err
	}
	if fs.IsStaging(base.Real) {
		return agent.TarResult{}, agent.Errorf(agent.CodeInvalid, base.Rel, "reserved path")
	}
	if fi, err := h.WS.Root().Lstat(base.Real); err == nil && !fi.IsDir() {
		return agent.TarResult{}, agent.Errorf(agent.CodeInvalid, base.Rel, "not a directory")
	}
	stage, err := h.newStaging()
	if err != nil {
		return agent.TarResult{}, err
	}
	defer h.dropStaging(stage)

	x := &extraction{h: h, g: a.Guard, max: a.MaxBytes, base: base, stage: stage, exact: a.Exact,
		kinds: map[string]entryKind{}, sizes: map[string]int64{}, ws: map[string]iofs.FileMode{}}
	if a.Exact {
		if x.st, err = newStager(h.WS, stage); err != nil {
			return agent.TarResult{}, fmt.Errorf("open the staging directory: %w", err)
		}
		defer x.st.close()
	}
	tr := tar.NewReader(in)
	for {
		if err := ctx.Err(); err != nil {
			return agent.TarResult{}, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return agent.TarResult{}, agent.Errorf(agent.CodeInvalid, "", "bad tar archive: %v", err)
		}
		if in.n-x.content > maxTarMeta {
			return agent.TarResult{}, agent.Errorf(agent.CodeTooLarge, hdr.Name, "archive holds more than %d bytes of headers", maxTarMeta)
		}
		if err := x.add(hdr, tr); err != nil {
			return agent.TarResult{}, err
		}
	}
	if n, err := io.CopyN(io.Discard, in, maxTarTrailer+1); n > maxTarTrailer {
		return agent.TarResult{}, agent.Errorf(agent.CodeTooLarge, "", "more than %d bytes follow the end of the archive", maxTarTrailer)
	} else if err != nil && !errors.Is(err, io.EOF) {
		return agent.TarResult{}, err
	}

	if x.exact {
		if err := x.finishExact(); err != nil {
			return agent.TarResult{}, err
		}
	}

	// Everything is accepted: apply.
	if err := ctx.Err(); err != nil {
		return agent.TarResult{}, err
	}
	if err := h.WS.Root().MkdirAll(base.Real, 0o755); err != nil {
		return agent.TarResult{}, err
	}
	if err := x.merge(stage, base.Real); err != nil {
		return agent.TarResult{}, fmt.Errorf("apply the archive: %w", err)
	}
	if err := x.dirModes(); err != nil {
		return agent.TarResult{}, fmt.Errorf("apply the archive's directory modes: %w", err)
	}
	return x.res, nil
}

// add validates one entry and stages it.
func (x *extraction) add(hdr *tar.Header, tr *tar.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil // PAX global records (git archive's commit id): no file
	}
	name, err := entryName(hdr.Name)
	if err != nil {
		return err
	}
	if name == "." {
		if hdr.Typeflag == tar.TypeDir {
			return nil // the archive's root directory
		}
		return agent.Errorf(agent.CodeInvalid, hdr.Name, "only a directory may name the archive's root")
	}
	if x.entries++; x.entries > agent.MaxTarEntries {
		return agent.Errorf(agent.CodeTooLarge, hdr.Name, "archive holds more than %d entries", agent.MaxTarEntries)
	}
	rel, real := path.Join(x.base.Rel, name), path.Join(x.base.Real, name)
	if fs.IsStaging(real) {
		return agent.Errorf(agent.CodeInvalid, hdr.Name, "reserved name")
	}
	if err := x.parents(hdr.Name, name); err != nil {
		return err
	}
	isDir := hdr.Typeflag == tar.TypeDir
	switch k, seen := x.kinds[name]; {
	case seen && k == kindImplied && !isDir:
		return agent.Errorf(agent.CodeInvalid, hdr.Name, "entry is a directory earlier in the archive")
	case seen && k != kindImplied:
		return agent.Errorf(agent.CodeInvalid, hdr.Name, "duplicate entry")
	}
	if err := fs.CheckGuard(x.g, true, rel, real); err != nil {
		return err
	}
	stage := path.Join(x.stage, name)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.claimDir(name); err != nil {
			return err
		}
		x.kinds[name] = kindDir
		if x.exact {
			if err := x.mkdirExact(hdr.Name, name); err != nil {
				return err
			}
			x.dirs = append(x.dirs, dirMeta{name, hdr.Mode, hdr.ModTime})
		} else if err := x.h.WS.Root().MkdirAll(stage, 0o755); err != nil {
			return x.stageErr(hdr.Name, err)
		}
		x.res.Dirs++
	case tar.TypeReg:
		if err := x.claimFile(hdr.Name, name); err != nil {
			return err
		}
		if err := x.charge(hdr.Name, hdr.Size); err != nil {
			return err
		}
		x.content += hdr.Size
		if x.exact {
			if err := x.fileExact(hdr, name, tr); err != nil {
				return err
			}
		} else if err := x.writeFile(hdr.Name, stage, hdr.Mode, tr); err != nil {
			return err
		}
		x.kinds[name], x.sizes[name] = kindFile, hdr.Size
		x.res.Files++
	case tar.TypeLink:
		target, err := x.linkTarget(hdr)
		if err != nil {
			return err
		}
		if err := x.claimFile(hdr.Name, name); err != nil {
			return err
		}
		if x.exact {
			// A link within the tree, as it was: no bytes of its own. Made once the
			// files are written.
			x.linkExact(hdr.Name, name, target)
			x.kinds[name], x.sizes[name] = kindFile, x.sizes[target]
			x.res.Files++
			return nil
		}
		if err := x.charge(hdr.Name, x.sizes[target]); err != nil {
			return err
		}
		f, err := x.h.WS.Root().Open(path.Join(x.stage, target))
		if err != nil {
			return x.stageErr(hdr.Name, err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return x.stageErr(hdr.Name, err)
		}
		err = x.writeFile(hdr.Name, stage, int64(fi.Mode().Perm()), f)
		f.Close()
		if err != nil {
			return err
		}
		x.kinds[name], x.sizes[name] = kindFile, x.sizes[target]
		x.res.Files++
	case tar.TypeSymlink:
		if x.exact {
			// Data, whatever it points at: the restore never follows it (parents refuses an
			// entry beneath it, merge replaces links and never writes through them).
			if hdr.Linkname == "" || strings.ContainsRune(hdr.Linkname, 0) {
				return agent.Errorf(agent.CodeInvalid, hdr.Name, "bad symlink target %q", hdr.Linkname)
			}
		} else if err := x.symlinkTarget(hdr, real); err != nil {
			return err
		}
		if err := x.claimFile(hdr.Name, name); err != nil {
			return err
		}
		if x.exact {
			if err := x.symlinkExact(hdr, name); err != nil {
				return err
			}
		} else {
			if err := x.h.WS.Root().MkdirAll(path.Dir(stage), 0o755); err != nil {
				return x.stageErr(hdr.Name, err)
			}
			if err := x.h.WS.Root().Symlink(hdr.Linkname, stage); err != nil {
				return x.stageErr(hdr.Name, err)
			}
		}
		x.kinds[name] = kindSymlink
		x.res.Files++
	default:
		return agent.Errorf(agent.CodeInvalid, hdr.Name, "tar entry type %q is not supported (only files, directories, symlinks and hard links)", string(hdr.Typeflag))
	}
	return nil
}

// parents checks the archive paths above name: each must be a directory of the archive
// (listed or implied), never a file or a symlink of it. New ones are claimed as implied
// directories.
func (x *extraction) parents(entry, name string) error {
	for i := 0; i < len(name); i++ {
		if name[i] != '/' {
			continue
		}
		p := name[:i]
		switch x.kinds[p] {
		case kindSymlink:
			return agent.Errorf(agent.CodeTraversal, entry, "entry is written through the archive's symlink %s", p)
		case kindFile:
			return agent.Errorf(agent.CodeInvalid, entry, "%s is not a directory in the archive", p)
		case 0:
			if err := x.claimDir(p); err != nil {
				return err
			}
			x.kinds[p] = kindImplied
		}
	}
	return nil
}

// existing returns what the workspace holds at archive path p (modeAbsent if nothing),
// without following symlinks, and remembers it.
func (x *extraction) existing(p string) (iofs.FileMode, error) {
	if m, ok := x.ws[p]; ok {
		return m, nil
	}
	if dir := path.Dir(p); dir != "." {
		m, err := x.existing(dir)
		if err != nil {
			return 0, err
		}
		if !m.IsDir() { // absent, or about to be replaced by a directory
			x.ws[p] = modeAbsent
			return modeAbsent, nil
		}
	}
	m := modeAbsent
	fi, err := x.h.WS.Root().Lstat(path.Join(x.base.Real, p))
	switch {
	case err == nil:
		m = fi.Mode()
	case errors.Is(err, iofs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
	default:
		return 0, err
	}
	x.ws[p] = m
	return m, nil
}

// claimDir makes p a directory of the archive: it merges into a workspace directory and
// replaces anything else there, which the guard must allow writing.
func (x *extraction) claimDir(p string) error {
	m, err := x.existing(p)
	if err != nil || m == modeAbsent || m.IsDir() {
		return err
	}
	return fs.CheckGuard(x.g, true, path.Join(x.base.Rel, p), path.Join(x.base.Real, p))
}

// claimFile makes name a file or link of the archive: it replaces what the workspace
// has there, except a directory.
func (x *extraction) claimFile(entry, name string) error {
	m, err := x.existing(name)
	if err != nil {
		return err
	}
	if m != modeAbsent && m.IsDir() {
		return agent.Errorf(agent.CodeInvalid, entry, "the workspace has a directory at %s; the archive would replace it with a file", path.Join(x.base.Rel, name))
	}
	return nil
}

// charge counts n bytes of file contents against MaxBytes.
func (x *extraction) charge(entry string, n int64) error {
	if n < 0 || (x.max > 0 && x.res.Bytes+n > x.max) {
		return agent.Errorf(agent.CodeTooLarge, entry, "archive holds more than %d bytes of files", x.max)
	}
	x.res.Bytes += n
	return nil
}

// writeFile stages a regular file from src.
func (x *extraction) writeFile(entry, stage string, mode int64, src io.Reader) error {
	if err := x.h.WS.Root().MkdirAll(path.Dir(stage), 0o755); err != nil {
		return x.stageErr(entry, err)
	}
	f, err := x.h.WS.Root().OpenFile(stage, os.O_WRONLY|os.O_CREATE|os.O_EXCL, iofs.FileMode(mode).Perm()|0o600)
	if err != nil {
		return x.stageErr(entry, err)
	}
	_, err = io.Copy(f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		var pe *iofs.PathError
		if errors.Is(err, context.Canceled) {
			return err
		}
		if errors.As(err, &pe) {
			return x.stageErr(entry, err) // the staging file's side
		}
		return agent.Errorf(agent.CodeInvalid, entry, "bad tar archive: %v", err)
	}
	return nil
}

func (x *extraction) stageErr(entry string, err error) error { return stageErr(entry, err) }

// stageErr names the entry in an error of the staging directory: a full disk is
// too_large, anything else internal.
func stageErr(entry string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG) {
		return agent.Errorf(agent.CodeTooLarge, entry, "no space left for the archive: %v", err)
	}
	return &agent.WireError{Code: agent.CodeInternal, Path: entry, Message: fmt.Sprintf("stage entry: %v", err)}
}

// dirModes gives the exact archive's directories their modes and mtimes, in place,
// deepest first: a directory its owner may not enter gets its mode after everything
// beneath it is done.
func (x *extraction) dirModes() error {
	slices.SortStableFunc(x.dirs, func(a, b dirMeta) int {
		return strings.Count(b.name, "/") - strings.Count(a.name, "/")
	})
	for _, d := range x.dirs {
		p := path.Join(x.base.Real, d.name)
		d2, err := x.h.WS.OpenReal(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		proc := fs.FDPath(d2)
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(d.mtime.UnixNano())}
		err = unix.UtimesNanoAt(unix.AT_FDCWD, proc, ts, 0)
		if err == nil {
			err = unix.Fchmodat(unix.AT_FDCWD, proc, uint32(d.mode)&0o7777, 0)
		}
		d2.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
