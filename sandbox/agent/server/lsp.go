package server

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"sync"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
	"github.com/cwsdev/cws/sandbox/agent/server/lsp"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
	"golang.org/x/sys/unix"
)

// maxLSPFile is the largest file synced to a language server or read to convert a
// result's positions.
const maxLSPFile = 16 << 20

// lspHost holds the agent's language-server manager, made on the first LSP call.
type lspHost struct {
	once  sync.Once
	m     *lsp.Manager
	cache sync.Map // workspace-relative path → *cachedFile
}

// cachedFile is a file's content as last read, with the identity and times it had: the
// manager reads every open document before each request, and an unchanged file (same
// inode, size, mtime and ctime) is not read again. The same slice comes back, which
// the manager also uses to skip re-hashing it.
type cachedFile struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
	data         []byte
}

func (s *Server) lspManager() *lsp.Manager {
	s.lsp.once.Do(func() {
		env := s.exec.Environ(nil)
		// The image's own Go settings win over the manager's defaults.
		for _, k := range []string{"GOTOOLCHAIN", "GOPATH", "GOMODCACHE", "GOCACHE", "GOFLAGS", "GOPROXY", "CGO_ENABLED", "GOROOT"} {
			if v, ok := os.LookupEnv(k); ok {
				env = append(env, k+"="+v)
			}
		}
		cfg := lsp.Config{Root: s.ws.Dir(), Env: env, IdleTimeout: s.cfg.LSPIdle, Log: s.log}
		if s.exec.Scope != nil {
			cfg.Start = s.exec.StartScoped // in a scoped domain of its own
		}
		s.lsp.m = lsp.New(cfg)
	})
	return s.lsp.m
}

// closeLSP kills the language servers (the agent is shutting down).
func (s *Server) closeLSP() {
	s.lsp.once.Do(func() {}) // none made: make none now
	if s.lsp.m != nil {
		s.lsp.m.Close()
	}
}

// lspWrote tells the language-server manager about a successful write (rel is the file)
// or upload (rel is the directory it went into): when it shows a project, the project's
// server is started and loaded in the background, reading through the writer's guard
// (lsp/warm.go). It returns at once.
func (s *Server) lspWrote(rel string, g *guard.Guard, dir bool) {
	if m := s.lspManager(); m != nil { // nil once the agent is closing
		m.Wrote(guardedFiles{ws: s.ws, g: g, cache: &s.lsp.cache}, rel, dir)
	}
}

// lspCall runs one code-intelligence tool (agent.LSPArgs).
func (s *Server) lspCall(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.LSPArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	res, dropped, err := s.lspManager().Run(ctx, a.Tool, a.Args, guardedFiles{ws: s.ws, g: a.Guard, cache: &s.lsp.cache})
	if err != nil {
		return nil, err
	}
	res, omitted, err := lsp.Fit(a.Tool, res, op.AnswerBudget) // no answer is too big (package op)
	if err != nil {
		return nil, err
	}
	return agent.LSPResult{Result: res, Dropped: dropped, Omitted: omitted}, nil
}

// guardedFiles reads workspace files for the manager as the read operation does:
// resolved beneath the workspace, the guard checked on the asked and the resolved path,
// opened without following links, hard links refused where the guard denies anything.
type guardedFiles struct {
	ws    *fs.Workspace
	g     *guard.Guard
	cache *sync.Map // of *cachedFile; nil: no cache
}

func (f guardedFiles) Read(rel string) ([]byte, error) {
	t, fd, err := f.ws.OpenChecked(rel, f.g, false, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, wireError(err)
	}
	defer fd.Close()
	fi, err := fd.Stat()
	if err != nil {
		return nil, wireError(err)
	}
	if fi.IsDir() {
		return nil, agent.Errorf(agent.CodeIsDir, t.Rel, "is a directory")
	}
	if !fi.Mode().IsRegular() {
		return nil, agent.Errorf(agent.CodeInvalid, t.Rel, "not a regular file")
	}
	if fi.Size() > maxLSPFile {
		return nil, agent.Errorf(agent.CodeTooLarge, t.Rel, "file is %d bytes; language servers get files up to %d", fi.Size(), maxLSPFile)
	}
	var st unix.Stat_t
	if f.cache != nil && unix.Fstat(int(fd.Fd()), &st) == nil {
		if v, ok := f.cache.Load(t.Real); ok {
			c := v.(*cachedFile)
			if c.dev == st.Dev && c.ino == st.Ino && c.size == st.Size && c.mtime == st.Mtim && c.ctime == st.Ctim {
				return c.data, nil
			}
		}
	}
	b, err := io.ReadAll(io.LimitReader(fd, maxLSPFile+1))
	if err != nil {
		return nil, wireError(err)
	}
	if f.cache != nil && st.Ino != 0 && int64(len(b)) == st.Size {
		f.cache.Store(t.Real, &cachedFile{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim, data: b})
	}
	return b, nil
}
