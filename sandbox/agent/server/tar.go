package server

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
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
			hdr, err := tar.FileInfoHeader(fi, link)
			if err != nil {
				continue // sockets and the like
			}
			hdr.Name, hdr.Uname, hdr.Gname = childName, "", ""
			if fi.IsDir() {
				hdr.Name += "/"
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			switch {
			case fi.IsDir():
				res.Dirs++
				if err := walk(childReal, childName); err != nil {
					return err
				}
			case fi.Mode().IsRegular():
				f, err := s.ws.root.Open(childReal)
				if err != nil {
					return err
				}
				n, err := io.Copy(tw, f)
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

func (s *Server) tarIn(ctx context.Context, args json.RawMessage, _ []byte, r *responder) (any, error) {
	var a agent.TarInArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	if r.in == nil {
		return nil, agent.Errorf(agent.CodeInvalid, "", "tar.in needs a streamed body")
	}
	defer io.Copy(io.Discard, r.in) // let the sender finish whatever happens
	if a.Path == "" {
		a.Path = "."
	}
	base, err := s.ws.open(a.Path, a.Guard, true)
	if err != nil {
		return nil, err
	}
	if err := s.ws.root.MkdirAll(base.real, 0o755); err != nil {
		return nil, err
	}
	var res agent.TarResult
	tr := tar.NewReader(r.in)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return res, nil
		}
		if err != nil {
			return nil, agent.Errorf(agent.CodeInvalid, "", "bad tar archive: %v", err)
		}
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if name == "" || strings.ContainsRune(hdr.Name, 0) {
			continue // the archive's root directory
		}
		rel := path.Join(base.rel, name)
		t, err := s.ws.open(rel, a.Guard, true)
		if err != nil {
			return nil, err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := s.ws.root.MkdirAll(t.real, 0o755); err != nil {
				return nil, err
			}
			res.Dirs++
		case tar.TypeReg:
			if a.MaxBytes > 0 && res.Bytes+hdr.Size > a.MaxBytes {
				return nil, agent.Errorf(agent.CodeTooLarge, t.rel, "archive holds more than %d bytes of files", a.MaxBytes)
			}
			if err := s.ws.root.MkdirAll(path.Dir(t.real), 0o755); err != nil {
				return nil, err
			}
			f, err := s.ws.root.OpenFile(t.real, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fs.FileMode(hdr.Mode).Perm()|0o600)
			if err != nil {
				return nil, err
			}
			n, err := io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, err
			}
			res.Files++
			res.Bytes += n
		case tar.TypeSymlink:
			if err := s.ws.root.MkdirAll(path.Dir(t.real), 0o755); err != nil {
				return nil, err
			}
			_ = s.ws.root.Remove(t.real)
			if err := s.ws.root.Symlink(hdr.Linkname, t.real); err != nil {
				return nil, err
			}
			res.Files++
		default:
			return nil, agent.Errorf(agent.CodeInvalid, hdr.Name, "tar entry type %q is not supported (only files, directories and symlinks)", string(hdr.Typeflag))
		}
	}
}
