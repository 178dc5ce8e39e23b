package keep

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cwsdev/cws/sandbox/agent"
)

// The wire: a connection carries calls one after the other. The caller writes a
// request as one JSON line (an adopt carries the process's files as SCM_RIGHTS on it)
// and nothing more until the keeper answered with a response line and then Body raw
// bytes (the output of an output call, as agent.ProcOutput.Body joins them).

// Operations.
const (
	opAdopt  = "adopt"  // Proc, files stdout, stderr[, pidfd] -> agent.ProcInfo
	opExited = "exited" // ID, Code
	opList   = "list"   // -> []agent.ProcInfo
	opCount  = "count"  // -> the number of running processes
	opOutput = "output" // Output -> agent.ProcOutput and its body
	opInfo   = "info"   // ID, WaitMS -> agent.ProcInfo
)

type request struct {
	Op     string                `json:"op"`
	ID     string                `json:"id,omitempty"`
	Proc   *Proc                 `json:"proc,omitempty"`
	Code   int                   `json:"code,omitempty"`
	Output *agent.ProcOutputArgs `json:"output,omitempty"`
	WaitMS int64                 `json:"waitMs,omitempty"`
}

type response struct {
	Error  *agent.WireError `json:"error,omitempty"`
	Result json.RawMessage  `json:"result,omitempty"`
	Body   int              `json:"body,omitempty"` // raw bytes after the line
}

// Bounds of a request.
const (
	maxRequest = 1 << 20
	maxFiles   = 3
)

// Serve answers calls on l until l is closed, and then closes the connections it
// accepted.
func (k *Keeper) Serve(l *net.UnixListener) error {
	var (
		mu    sync.Mutex
		conns = map[*net.UnixConn]struct{}{}
	)
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for c := range conns {
			c.Close()
		}
		conns = nil
	}()
	for {
		c, err := l.AcceptUnix()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			// EMFILE and friends: wait for a descriptor to be freed.
			k.log.Warn("process keeper: accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		mu.Lock()
		if conns == nil {
			mu.Unlock()
			c.Close()
			return nil
		}
		conns[c] = struct{}{}
		mu.Unlock()
		go func() {
			k.serveConn(c)
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		}()
	}
}

// serveConn answers the calls of one connection, one after the other, once its caller
// proved the key, if there is one (key.go).
func (k *Keeper) serveConn(c *net.UnixConn) {
	defer c.Close()
	if err := proveServe(c); err != nil {
		k.log.Warn("process keeper: refused a connection", "err", err)
		return
	}
	for {
		req, fds, err := readRequest(c)
		if err != nil {
			return
		}
		ctx, done := watchHangup(c, req)
		res, body, err := k.handle(ctx, req, fds)
		done()
		var resp response
		if err != nil {
			var we *agent.WireError
			if !errors.As(err, &we) {
				we = agent.Errorf(agent.CodeInternal, "", "process keeper: %v", err)
			}
			resp.Error = we
			body = nil
		} else if res != nil {
			if resp.Result, err = json.Marshal(res); err != nil {
				resp.Error, body = agent.Errorf(agent.CodeInternal, "", "process keeper: %v", err), nil
			}
		}
		resp.Body = len(body)
		line, _ := json.Marshal(resp)
		if _, err := c.Write(append(append(line, '\n'), body...)); err != nil {
			return
		}
	}
}

// watchHangup ends the context of a call that waits (for output, for an end) when
// its caller hangs up: the caller sends nothing while it waits for the answer, so the
// connection turns readable only when it is closed. done stops watching.
func watchHangup(c *net.UnixConn, req request) (ctx context.Context, done func()) {
	if req.WaitMS <= 0 && (req.Output == nil || req.Output.WaitMS <= 0) {
		return context.Background(), func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		var b [1]byte
		_, _ = c.Read(b[:])
		cancel()
	}()
	return ctx, func() {
		_ = c.SetReadDeadline(time.Unix(1, 0)) // wakes the watcher
		<-stopped
		cancel()
		_ = c.SetReadDeadline(time.Time{})
	}
}

// handle runs one call. It owns fds.
func (k *Keeper) handle(ctx context.Context, req request, fds []int) (any, []byte, error) {
	if req.Op != opAdopt {
		closeFDs(fds)
	}
	switch req.Op {
	case opAdopt:
		files, err := adoptFiles(fds)
		if err != nil {
			return nil, nil, err
		}
		if req.Proc == nil {
			files.close()
			return nil, nil, agent.Errorf(agent.CodeInvalid, "", "adopt: no process")
		}
		pi, err := k.Adopt(ctx, *req.Proc, files)
		return pi, nil, err
	case opExited:
		return nil, nil, k.Exited(ctx, req.ID, req.Code)
	case opList:
		ps, err := k.List(ctx)
		return ps, nil, err
	case opCount:
		n, err := k.Running(ctx)
		return n, nil, err
	case opOutput:
		if req.Output == nil {
			return nil, nil, agent.Errorf(agent.CodeInvalid, "", "output: no arguments")
		}
		out, err := k.Output(ctx, *req.Output)
		if err != nil {
			return nil, nil, err
		}
		return out, out.Body(), nil
	case opInfo:
		pi, err := k.Info(ctx, req.ID, time.Duration(req.WaitMS)*time.Millisecond)
		return pi, nil, err
	}
	return nil, nil, agent.Errorf(agent.CodeInvalid, "", "process keeper: unknown operation %q", req.Op)
}

// readRequest reads the request line and the descriptors that came with it.
func readRequest(c *net.UnixConn) (request, []int, error) {
	var (
		data []byte
		fds  []int
		buf  = make([]byte, 4096)
		oob  = make([]byte, unix.CmsgSpace(4*(maxFiles+1)))
	)
	for !bytes.Contains(data, []byte{'\n'}) {
		n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
		if oobn > 0 {
			fds = append(fds, parseRights(oob[:oobn])...)
		}
		data = append(data, buf[:max(n, 0)]...)
		if err == nil && n == 0 && oobn == 0 {
			err = errors.New("connection closed before the request ended")
		}
		if err == nil && len(data) > maxRequest {
			err = errors.New("request too large")
		}
		if err != nil {
			closeFDs(fds)
			return request{}, nil, err
		}
	}
	var req request
	line, rest, _ := bytes.Cut(data, []byte{'\n'})
	if len(rest) > 0 {
		closeFDs(fds)
		return request{}, nil, errors.New("a request before the answer to the last one")
	}
	if err := json.Unmarshal(line, &req); err != nil {
		closeFDs(fds)
		return request{}, nil, err
	}
	return req, fds, nil
}

func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// adoptFiles turns an adopt's descriptors into Files, read through the runtime's
// poller (no thread waits on a pipe or a pidfd).
func adoptFiles(fds []int) (Files, error) {
	if len(fds) < 2 || len(fds) > maxFiles {
		closeFDs(fds)
		return Files{}, agent.Errorf(agent.CodeInvalid, "", "adopt: want stdout, stderr and a pidfd, got %d descriptors", len(fds))
	}
	files := make([]*os.File, maxFiles)
	for i, fd := range fds {
		_ = unix.SetNonblock(fd, true)
		files[i] = os.NewFile(uintptr(fd), []string{"stdout", "stderr", "pidfd"}[i])
	}
	return Files{Stdout: files[0], Stderr: files[1], PIDFD: files[2]}, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
