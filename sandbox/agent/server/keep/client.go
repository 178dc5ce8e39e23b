package keep

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/ident"
)

// Client is serve's side: it calls the keeper listening in dir, and starts one (bin
// keep dir) when a process is to be adopted and none listens. It dials with the
// agent's own fs identity (dir is the agent's, not the workspace user's), and keeps a
// few connections open for the next calls.
//
// Without a keeper, what is asked about comes from the records: the processes of a
// keeper that ended are lost (agent.CodeLost).
type Client struct {
	dir, bin string
	log      *slog.Logger
	startMu  sync.Mutex

	mu   sync.Mutex
	idle []*conn // open connections for the next calls
}

// NewClient returns a client of the keeper in dir, started from the agent binary bin.
func NewClient(dir, bin string, log *slog.Logger) *Client {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{dir: dir, bin: bin, log: log}
}

// errGone: no keeper listens in the directory.
var errGone = errors.New("no process keeper")

// Adopt hands a started process to the keeper, starting the keeper first if none
// runs. The files are closed here: the keeper has its own.
func (c *Client) Adopt(ctx context.Context, pr Proc, f Files) (agent.ProcInfo, error) {
	defer f.close()
	files := []*os.File{f.Stdout, f.Stderr}
	if f.PIDFD != nil {
		files = append(files, f.PIDFD)
	}
	var pi agent.ProcInfo
	_, err := c.call(ctx, request{Op: opAdopt, Proc: &pr}, files, &pi)
	if errors.Is(err, errGone) {
		if err = c.start(); err != nil {
			return pi, err
		}
		_, err = c.call(ctx, request{Op: opAdopt, Proc: &pr}, files, &pi)
	}
	return pi, err
}

// Exited tells the keeper the exit code serve reaped. With no keeper there is no one
// to tell.
func (c *Client) Exited(ctx context.Context, id string, code int) error {
	_, err := c.call(ctx, request{Op: opExited, ID: id, Code: code}, nil, nil)
	if errors.Is(err, errGone) {
		return nil
	}
	return err
}

// List lists every process.
func (c *Client) List(ctx context.Context) ([]agent.ProcInfo, error) {
	var ps []agent.ProcInfo
	_, err := c.call(ctx, request{Op: opList}, nil, &ps)
	if errors.Is(err, errGone) {
		k, err := c.offline()
		if err != nil {
			return nil, err
		}
		return k.List(ctx)
	}
	return ps, err
}

// Running counts the running processes; none run without a keeper.
func (c *Client) Running(ctx context.Context) (int, error) {
	var n int
	_, err := c.call(ctx, request{Op: opCount}, nil, &n)
	if errors.Is(err, errGone) {
		return 0, nil
	}
	return n, err
}

// Output reads a process's output (Keeper.Output).
func (c *Client) Output(ctx context.Context, a agent.ProcOutputArgs) (*agent.ProcOutput, error) {
	var out agent.ProcOutput
	body, err := c.call(ctx, request{Op: opOutput, Output: &a}, nil, &out)
	if errors.Is(err, errGone) {
		k, err := c.offline()
		if err != nil {
			return nil, err
		}
		return k.Output(ctx, a)
	}
	if err != nil {
		return nil, err
	}
	out.SetBody(body)
	return &out, nil
}

// Info returns a process once it ended or wait passed (Keeper.Info).
func (c *Client) Info(ctx context.Context, id string, wait time.Duration) (agent.ProcInfo, error) {
	var pi agent.ProcInfo
	_, err := c.call(ctx, request{Op: opInfo, ID: id, WaitMS: wait.Milliseconds()}, nil, &pi)
	if errors.Is(err, errGone) {
		k, err := c.offline()
		if err != nil {
			return pi, err
		}
		return k.Info(ctx, id, 0)
	}
	return pi, err
}

// maxIdle bounds the connections a client keeps open for its next calls.
const maxIdle = 4

// conn is one connection to the keeper.
type conn struct {
	*net.UnixConn
	br *bufio.Reader
}

// call makes one call, sending files with the request, and decodes the result into
// result; it returns the response's body. It reuses an idle connection, and dials
// again when that one went stale with its keeper: no call is applied twice by then,
// since the keeper that might have applied it is gone with its state (and an exit
// code is only ever taken once).
func (c *Client) call(ctx context.Context, req request, files []*os.File, result any) ([]byte, error) {
	for retried := false; ; retried = true {
		kc, idle, err := c.get(!retried)
		if err != nil {
			return nil, err
		}
		stop := context.AfterFunc(ctx, func() { kc.Close() })
		body, err := kc.exchange(req, files, result)
		var we *agent.WireError
		if answered := err == nil || errors.As(err, &we); answered && stop() {
			c.put(kc)
		} else {
			kc.Close()
		}
		switch {
		case err == nil || we != nil:
			return body, err
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case idle && !retried:
			continue
		}
		return nil, err
	}
}

// get returns an idle connection (idle true) when one is kept and may be used, else
// a new one.
func (c *Client) get(mayReuse bool) (*conn, bool, error) {
	if mayReuse {
		c.mu.Lock()
		if n := len(c.idle); n > 0 {
			kc := c.idle[n-1]
			c.idle = c.idle[:n-1]
			c.mu.Unlock()
			return kc, true, nil
		}
		c.mu.Unlock()
	}
	uc, err := c.dial()
	if err != nil {
		return nil, false, err
	}
	return &conn{UnixConn: uc, br: bufio.NewReader(uc)}, false, nil
}

func (c *Client) put(kc *conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.idle) < maxIdle {
		c.idle = append(c.idle, kc)
		return
	}
	kc.Close()
}

func (kc *conn) exchange(req request, files []*os.File, result any) ([]byte, error) {
	line, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	line = append(line, '\n')
	n := 0
	if len(files) > 0 {
		fds := make([]int, 0, len(files))
		for _, f := range files {
			fd, err := rawFD(f)
			if err != nil {
				return nil, err
			}
			fds = append(fds, fd)
		}
		// The descriptors travel with the first bytes; files stay open until then.
		if n, _, err = kc.WriteMsgUnix(line, unix.UnixRights(fds...), nil); err != nil {
			return nil, fmt.Errorf("process keeper: %w", err)
		}
	}
	if n < len(line) {
		if _, err := kc.Write(line[n:]); err != nil {
			return nil, fmt.Errorf("process keeper: %w", err)
		}
	}
	rl, err := kc.br.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("process keeper: no answer: %w", err)
	}
	var resp response
	if err := json.Unmarshal(rl, &resp); err != nil {
		return nil, fmt.Errorf("process keeper: bad answer: %w", err)
	}
	var body []byte
	if resp.Body > 0 {
		body = make([]byte, resp.Body)
		if _, err := io.ReadFull(kc.br, body); err != nil {
			return nil, fmt.Errorf("process keeper: answer cut short: %w", err)
		}
	}
	if resp.Error != nil {
		return nil, resp.Error
	}
	if result != nil && len(resp.Result) > 0 {
		if err := json.Unmarshal(resp.Result, result); err != nil {
			return nil, fmt.Errorf("process keeper: bad answer: %w", err)
		}
	}
	return body, nil
}

// rawFD is f's descriptor, left as it is (File.Fd would make it blocking).
func rawFD(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// dial connects to the keeper; errGone when none listens.
func (c *Client) dial() (*net.UnixConn, error) {
	var conn *net.UnixConn
	err := ident.Private(func() (err error) {
		conn, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: socketPath(c.dir), Net: "unix"})
		return err
	})
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return nil, errGone
	}
	if err != nil {
		return nil, fmt.Errorf("process keeper: %w", err)
	}
	if err := proveKeeper(conn); err != nil { // key.go
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// start starts a keeper unless one listens by now.
func (c *Client) start() error {
	c.startMu.Lock()
	defer c.startMu.Unlock()
	if conn, err := c.dial(); err == nil {
		conn.Close()
		return nil
	}
	if c.bin == "" {
		return fmt.Errorf("process keeper: no agent binary to start one")
	}
	c.log.Info("starting the process keeper", "dir", c.dir)
	return Start(c.bin, c.dir)
}

// offline answers from the records alone, when no keeper runs: every process is lost.
func (c *Client) offline() (*Keeper, error) {
	var recs []agent.ProcInfo
	var run string
	err := ident.Private(func() (err error) {
		if run, err = loadRun(c.dir); err != nil {
			return err
		}
		recs, err = loadRecords(c.dir)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("process keeper records: %w", err)
	}
	k := &Keeper{run: run, log: c.log, procs: map[string]*proc{}}
	for _, r := range recs {
		p := lostProc(r)
		k.procs[p.id] = p
	}
	return k, nil
}
