// Package archive serves tar.out and tar.in of package agent: a directory of the
// workspace streamed out as a tar archive, and an archive extracted into one, checked
// whole before anything lands.
package archive

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"path"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
	"golang.org/x/sys/unix"
)

// Handlers serves the archive operations on a workspace.
type Handlers struct {
	WS  *fs.Workspace
	Log *slog.Logger
	// Wrote, if set, is told of each accepted upload (rel is the directory it went
	// into), under the writer's guard. It must return at once.
	Wrote func(rel string, g *guard.Guard, dir bool)
}

// eventWriter turns writes into data events, in chunks.
type eventWriter struct{ r *op.Responder }

func (w eventWriter) Write(p []byte) (int, error) {
	if err := w.r.Event(agent.EventData, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// TarOut streams a directory out as a tar archive in data events (agent.TarOutArgs).
func (h *Handlers) TarOut(ctx context.Context, args json.RawMessage, _ []byte, r *op.Responder) (any, error) {
	var a agent.TarOutArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	if a.Path == "" {
		a.Path = "."
	}
	t, err := h.WS.Open(a.Path, a.Guard, false)
	if err != nil {
		return nil, err
	}
	var res agent.TarResult
	tw := tar.NewWriter(eventWriter{r})
	var walk func(real, name string) error
	walk = func(real, name string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		ents, err := h.WS.ReadDir(real)
		if err != nil {
			return err
		}
		for _, e := range ents {
			childReal, childName := path.Join(real, e.Name()), path.Join(name, e.Name())
			if fs.IsStaging(childReal) {
				continue // an upload in progress
			}
			if a.Guard != nil && (a.Guard.Check(childReal) != nil || a.Guard.Check(path.Join(t.Rel, childName)) != nil) {
				continue
			}
			fi, err := e.Info()
			if err != nil {
				continue
			}
			link := ""
			if fi.Mode()&iofs.ModeSymlink != 0 {
				link, _ = h.WS.Root().Readlink(childReal)
			}
			// A regular file is opened (without following links) before its header is
			// written, and the header describes what was opened.
			var f *os.File
			if fi.Mode().IsRegular() {
				f, err = h.WS.OpenReal(childReal, unix.O_RDONLY|unix.O_NONBLOCK, 0)
				if err == nil && fs.CheckLinks(f, a.Guard, childName) != nil {
					f.Close()
					continue // maybe a denied file under another name
				}
				if err == nil {
					fi, err = f.Stat()
				}
				if err != nil || !fi.Mode().IsRegular() {
					if f != nil {
						f.Close()
					}
					continue // vanished, or swapped for a link since it was listed
				}
			}
			hdr, err := tar.FileInfoHeader(fi, link)
			if err != nil {
				continue // sockets and the like
			}
			hdr.Name, hdr.Uname, hdr.Gname = childName, "", ""
			if fi.IsDir() {
				hdr.Name += "/"
			}
			if err := tw.WriteHeader(hdr); err != nil {
				if f != nil {
					f.Close()
				}
				return err
			}
			switch {
			case fi.IsDir():
				res.Dirs++
				if err := walk(childReal, childName); err != nil {
					return err
				}
			case fi.Mode().IsRegular():
				n, err := io.Copy(tw, io.LimitReader(f, hdr.Size))
				f.Close()
				if err != nil {
					return err
				}
				res.Files++
				res.Bytes += n
			}
		}
		return nil
	}
	if err := walk(t.Real, "."); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return res, nil
}
