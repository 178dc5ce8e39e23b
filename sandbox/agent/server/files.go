package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"unicode/utf8"

	"github.com/cwsdev/cws/sandbox/agent"
)

// binarySniff is how much of a file decides whether it is binary.
const binarySniff = 8 << 10

func fileInfo(rel string, fi fs.FileInfo) agent.FileInfo {
	t := agent.TypeOther
	switch {
	case fi.Mode().IsRegular():
		t = agent.TypeFile
	case fi.IsDir():
		t = agent.TypeDir
	case fi.Mode()&fs.ModeSymlink != 0:
		t = agent.TypeSymlink
	}
	return agent.FileInfo{Name: path.Base(rel), Path: rel, Type: t, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), MTime: fi.ModTime().UTC()}
}

func (s *Server) stat(ctx context.Context, args json.RawMessage, _ []byte, _ *responder) (any, error) {
	var a agent.StatArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	t, err := s.ws.open(a.Path, a.Guard, false)
	if err != nil {
		return nil, err
	}
	fi, err := s.ws.root.Stat(t.real)
	if err != nil {
		return nil, err
	}
	return fileInfo(t.rel, fi), nil
}

// isBinary reports whether a file's first bytes look binary: a NUL byte, or bytes that
// are not UTF-8 (ignoring a rune cut at the end of the sample).
func isBinary(head []byte) bool {
	for i := range head {
		if head[i] == 0 {
			return true
		}
	}
	for cut := 0; cut < utf8.UTFMax && cut <= len(head); cut++ {
		if utf8.Valid(head[:len(head)-cut]) {
			return false
		}
	}
	return true
}

func (s *Server) read(ctx context.Context, args json.RawMessage, _ []byte, r *responder) (any, error) {
	var a agent.ReadArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	if a.Offset < 0 || a.Length < 0 {
		return nil, agent.Errorf(agent.CodeInvalid, a.Path, "offset and length must not be negative")
	}
	t, err := s.ws.open(a.Path, a.Guard, false)
	if err != nil {
		return nil, err
	}
	f, err := s.ws.root.Open(t.real)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, agent.Errorf(agent.CodeIsDir, t.rel, "is a directory")
	}
	if a.MaxSize > 0 && fi.Size() > a.MaxSize {
		return nil, agent.Errorf(agent.CodeTooLarge, t.rel, "file is %d bytes, the limit is %d", fi.Size(), a.MaxSize)
	}
	var src io.Reader = f
	if a.Offset > 0 {
		if _, err := f.Seek(a.Offset, io.SeekStart); err != nil {
			return nil, err
		}
	}
	if a.Length > 0 {
		src = io.LimitReader(f, a.Length)
	}
	res := agent.ReadResult{Info: fileInfo(t.rel, fi)}
	h := sha256.New()
	buf := make([]byte, min(agent.ChunkSize, max(fi.Size()+1, 512)))
	var head []byte
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n, rerr := io.ReadFull(src, buf)
		if n > 0 {
			chunk := buf[:n]
			if len(head) < binarySniff {
				head = append(head, chunk[:min(n, binarySniff-len(head))]...)
			}
			if a.Hash {
				h.Write(chunk)
			}
			if err := r.event(agent.EventData, chunk); err != nil {
				return nil, err
			}
			res.N += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return nil, rerr
		}
	}
	res.IsBinary = isBinary(head)
	if a.Hash {
		res.SHA256 = hex.EncodeToString(h.Sum(nil))
	}
	return res, nil
}

func (s *Server) write(ctx context.Context, args json.RawMessage, body []byte, _ *responder) (any, error) {
	var a agent.WriteArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	if a.MaxSize > 0 && int64(len(body)) > a.MaxSize {
		return nil, agent.Errorf(agent.CodeTooLarge, a.Path, "content is %d bytes, the limit is %d", len(body), a.MaxSize)
	}
	t, err := s.ws.open(a.Path, a.Guard, true)
	if err != nil {
		return nil, err
	}
	if t.real == "." {
		return nil, agent.Errorf(agent.CodeIsDir, t.rel, "is a directory")
	}
	mode := fs.FileMode(0o644)
	if a.Mode != 0 {
		mode = fs.FileMode(a.Mode).Perm()
	}
	switch fi, err := s.ws.root.Stat(t.real); {
	case err == nil && fi.IsDir():
		return nil, agent.Errorf(agent.CodeIsDir, t.rel, "is a directory")
	case err == nil:
		mode = fi.Mode().Perm()
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	case !a.Create:
		return nil, agent.Errorf(agent.CodeNotFound, t.rel, "file does not exist")
	}
	dir := path.Dir(t.real)
	if _, err := s.ws.root.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if !a.Mkdirs {
			return nil, agent.Errorf(agent.CodeNotFound, path.Dir(t.rel), "parent directory does not exist")
		}
		if err := s.ws.root.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	if a.Atomic {
		err = s.writeAtomic(t.real, body, mode)
	} else {
		err = s.ws.root.WriteFile(t.real, body, mode)
	}
	if err != nil {
		return nil, err
	}
	fi, err := s.ws.root.Stat(t.real)
	if err != nil {
		return nil, err
	}
	return fileInfo(t.rel, fi), nil
}

// writeAtomic writes a temp file beside the target and renames it over the target, so a
// reader sees the old content or the new, never a mix.
func (s *Server) writeAtomic(real string, body []byte, mode fs.FileMode) error {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(path.Dir(real), "."+path.Base(real)+".cws-"+hex.EncodeToString(rnd[:])+".tmp")
	f, err := s.ws.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.ws.root.Rename(tmp, real)
	}
	if err != nil {
		_ = s.ws.root.Remove(tmp)
	}
	return err
}

func (s *Server) remove(ctx context.Context, args json.RawMessage, _ []byte, _ *responder) (any, error) {
	var a agent.RemoveArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	t, err := s.ws.entry(a.Path, a.Guard)
	if err != nil {
		return nil, err
	}
	if _, err := s.ws.root.Lstat(t.real); err != nil {
		return nil, err
	}
	if a.Recursive {
		return nil, s.ws.root.RemoveAll(t.real)
	}
	return nil, s.ws.root.Remove(t.real)
}

func (s *Server) rename(ctx context.Context, args json.RawMessage, _ []byte, _ *responder) (any, error) {
	var a agent.RenameArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	from, err := s.ws.entry(a.From, a.Guard)
	if err != nil {
		return nil, err
	}
	to, err := s.ws.entry(a.To, a.Guard)
	if err != nil {
		return nil, err
	}
	if _, err := s.ws.root.Lstat(from.real); err != nil {
		return nil, err
	}
	if _, err := s.ws.root.Lstat(to.real); err == nil && !a.Overwrite {
		return nil, agent.Errorf(agent.CodeExists, to.rel, "destination exists")
	}
	if a.Mkdirs {
		if err := s.ws.root.MkdirAll(path.Dir(to.real), 0o755); err != nil {
			return nil, err
		}
	}
	if err := s.ws.root.Rename(from.real, to.real); err != nil {
		return nil, err
	}
	fi, err := s.ws.root.Lstat(to.real)
	if err != nil {
		return nil, err
	}
	return fileInfo(to.rel, fi), nil
}

func (s *Server) mkdir(ctx context.Context, args json.RawMessage, _ []byte, _ *responder) (any, error) {
	var a agent.MkdirArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	t, err := s.ws.open(a.Path, a.Guard, true)
	if err != nil {
		return nil, err
	}
	if err := s.ws.root.MkdirAll(t.real, 0o755); err != nil {
		return nil, err
	}
	fi, err := s.ws.root.Stat(t.real)
	if err != nil {
		return nil, err
	}
	return fileInfo(t.rel, fi), nil
}
