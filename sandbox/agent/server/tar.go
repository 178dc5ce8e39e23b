package server

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path"

	"github.com/cwsdev/cws/sandbox/agent"
	"golang.org/x/sys/unix"
)

// eventWriter turns writes into data events, in chunks.
type eventWriter struct{ r *responder }

func (w eventWriter) Write(p []byte) (int, error) {
	if err := w.r.event(agent.EventData, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (s *Server) tarOut(ctx context.Context, args json.RawMessage, _ []byte, r *responder) (any, error) {
	var a agent.TarOutArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	if a.Path == "" {
		a.Path = "."
	}
	t, err := s.ws.open(a.Path, a.Guard, false)
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
		ents, err := s.ws.readDir(real)
		if err != nil {
			return err
		}
		for _, e := range ents {
			childReal, childName := path.Join(real, e.Name()), path.Join(name, e.Name())
			if isStaging(childReal) {
				continue // an upload in progress
			}
			if a.Guard != nil && (a.Guard.Check(childReal) != nil || a.Guard.Check(path.Join(t.rel, childName)) != nil) {
				continue
			}
			fi, err := e.Info()
			if err != nil {
				continue
			}
			link := ""
			if fi.Mode()&fs.ModeSymlink != 0 {
				link, _ = s.ws.root.Readlink(childReal)
			}
			// A regular file is opened (without following links) before its header is
			// written, and the header describes what was opened.
			var f *os.File
			if fi.Mode().IsRegular() {
				f, err = s.ws.openReal(childReal, unix.O_RDONLY|unix.O_NONBLOCK, 0)
				if err == nil && checkLinks(f, a.Guard, childName) != nil {
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
	if err := walk(t.real, "."); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return res, nil
}
