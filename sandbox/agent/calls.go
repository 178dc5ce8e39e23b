package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"time"
)

// Ping checks that the agent answers, and reports who it is.
func (c *Client) Ping(ctx context.Context) (PingResult, error) {
	var r PingResult
	err := c.Call(ctx, OpPing, struct{}{}, nil, nil, &r)
	return r, err
}

// Stat returns one path's FileInfo.
func (c *Client) Stat(ctx context.Context, a StatArgs) (FileInfo, error) {
	var r FileInfo
	err := c.Call(ctx, OpStat, a, nil, nil, &r)
	return r, err
}

// ReadTo streams a file (or a range of it) into w.
func (c *Client) ReadTo(ctx context.Context, a ReadArgs, w io.Writer) (ReadResult, error) {
	r, ok, tried, err := c.readLocal(ctx, a, w)
	if ok {
		return r, err
	}
	if tried {
		ctx = context.WithValue(ctx, agentOnly{}, true)
	}
	r = ReadResult{}
	err = c.Call(ctx, OpRead, a, nil, dataTo(readBound(a, w)), &r)
	return r, err
}

// readBound holds an answer to a to what a asked for: no more than Length bytes, nor
// more than MaxSize past the offset. The agent keeps to it; a peer posing as the agent
// that does not gets too_large, and cws holds no more than asked.
func readBound(a ReadArgs, w io.Writer) io.Writer {
	limit := int64(-1)
	if a.MaxSize > 0 {
		limit = max(a.MaxSize-a.Offset, 0)
	}
	if a.Length > 0 && (limit < 0 || a.Length < limit) {
		limit = a.Length
	}
	if limit < 0 {
		return w
	}
	return &boundedWriter{w: w, left: limit, path: a.Path}
}

type boundedWriter struct {
	w    io.Writer
	left int64
	path string
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		return 0, Errorf(CodeTooLarge, b.path, "the agent sent more than the read asked for")
	}
	b.left -= int64(len(p))
	return b.w.Write(p)
}

// ReadFile reads a file (or a range of it) into memory. A read whose stream broke
// after part of its data came (which Call does not retry, as it does one that broke
// before) is read again from nothing, up to maxRetries times.
func (c *Client) ReadFile(ctx context.Context, a ReadArgs) ([]byte, ReadResult, error) {
	var buf bytes.Buffer
	for attempt := 0; ; attempt++ {
		buf.Reset()
		r, err := c.ReadTo(ctx, a, &buf)
		if err == nil || attempt >= maxRetries || buf.Len() == 0 || !errors.Is(err, errRetryable) || errors.Is(err, ErrUnresponsive) {
			return buf.Bytes(), r, err
		}
		select {
		case <-ctx.Done():
			return buf.Bytes(), r, err
		case <-time.After(time.Duration(attempt+1) * 100 * time.Millisecond):
		}
	}
}

// WriteFile writes content to a file.
func (c *Client) WriteFile(ctx context.Context, a WriteArgs, content []byte) (FileInfo, error) {
	var r FileInfo
	err := c.Call(ctx, OpWrite, a, content, nil, &r)
	return r, err
}

// List lists a directory.
func (c *Client) List(ctx context.Context, a ListArgs) (ListResult, error) {
	var r ListResult
	err := c.Call(ctx, OpList, a, nil, nil, &r)
	return r, err
}

// Remove removes a file or tree.
func (c *Client) Remove(ctx context.Context, a RemoveArgs) error {
	return c.Call(ctx, OpRemove, a, nil, nil, nil)
}

// Rename moves a file or directory.
func (c *Client) Rename(ctx context.Context, a RenameArgs) (FileInfo, error) {
	var r FileInfo
	err := c.Call(ctx, OpRename, a, nil, nil, &r)
	return r, err
}

// Mkdir creates a directory and its parents.
func (c *Client) Mkdir(ctx context.Context, a MkdirArgs) (FileInfo, error) {
	var r FileInfo
	err := c.Call(ctx, OpMkdir, a, nil, nil, &r)
	return r, err
}

// Search searches file contents.
func (c *Client) Search(ctx context.Context, a SearchArgs) (SearchResult, error) {
	var r SearchResult
	err := c.Call(ctx, OpSearch, a, nil, nil, &r)
	return r, err
}

// Exec runs a command to completion. With a.Stream, onOutput receives stdout and stderr
// chunks as they are produced (event is EventStdout or EventStderr).
func (c *Client) Exec(ctx context.Context, a ExecArgs, stdin []byte, onOutput EventFunc) (ExecResult, error) {
	var r ExecResult
	err := c.Call(ctx, OpExec, a, stdin, onOutput, &r)
	return r, err
}

// ProcStart starts a background process.
func (c *Client) ProcStart(ctx context.Context, a ProcStartArgs) (ProcInfo, error) {
	var r ProcInfo
	err := c.Call(ctx, OpProcStart, a, nil, nil, &r)
	return r, err
}

// ProcList lists background processes, running and finished.
func (c *Client) ProcList(ctx context.Context) ([]ProcInfo, error) {
	var r []ProcInfo
	err := c.Call(ctx, OpProcList, struct{}{}, nil, nil, &r)
	return r, err
}

// ProcOutput reads a background process's output.
func (c *Client) ProcOutput(ctx context.Context, a ProcOutputArgs) (ProcOutput, error) {
	var r ProcOutput
	err := c.Call(ctx, OpProcOutput, a, nil, nil, &r)
	return r, err
}

// ProcKill stops a background process's group.
func (c *Client) ProcKill(ctx context.Context, a ProcKillArgs) (ProcInfo, error) {
	var r ProcInfo
	err := c.Call(ctx, OpProcKill, a, nil, nil, &r)
	return r, err
}

// TarOut streams a directory as a tar archive into w.
func (c *Client) TarOut(ctx context.Context, a TarOutArgs, w io.Writer) (TarResult, error) {
	var r TarResult
	err := c.Call(ctx, OpTarOut, a, nil, dataTo(w), &r)
	return r, err
}

// TarIn extracts the tar archive read from archive into a directory.
func (c *Client) TarIn(ctx context.Context, a TarInArgs, archive io.Reader) (TarResult, error) {
	var r TarResult
	err := c.CallStream(ctx, OpTarIn, a, archive, nil, &r)
	return r, err
}

// Check returns which paths the guard refuses to show (see CheckArgs).
func (c *Client) Check(ctx context.Context, a CheckArgs) (CheckResult, error) {
	var r CheckResult
	err := c.Call(ctx, OpCheck, a, nil, nil, &r)
	return r, err
}

// TermRun runs shell syntax in a terminal (or a fresh shell when a.Background). With
// a.Stream, onOutput receives stdout and stderr chunks as they are produced.
func (c *Client) TermRun(ctx context.Context, a TermRunArgs, onOutput EventFunc) (TermRunResult, error) {
	var r TermRunResult
	err := c.Call(ctx, OpTermRun, a, nil, onOutput, &r)
	return r, err
}

// TermRead reads a terminal's scrollback.
func (c *Client) TermRead(ctx context.Context, a TermReadArgs) (TermOutput, error) {
	var r TermOutput
	err := c.Call(ctx, OpTermRead, a, nil, nil, &r)
	return r, err
}

// TermInfo describes a terminal and the OS.
func (c *Client) TermInfo(ctx context.Context, a TermIDArgs) (TermInfo, error) {
	var r TermInfo
	err := c.Call(ctx, OpTermInfo, a, nil, nil, &r)
	return r, err
}

// TermClose ends a terminal, killing what runs in it.
func (c *Client) TermClose(ctx context.Context, a TermIDArgs) error {
	return c.Call(ctx, OpTermClose, a, nil, nil, nil)
}

// dataTo writes a call's data events to w.
func dataTo(w io.Writer) EventFunc {
	return func(ev string, data []byte) error {
		if ev != EventData {
			return nil
		}
		_, err := w.Write(data)
		return err
	}
}

// LSP runs one code-intelligence tool (see LSPArgs).
func (c *Client) LSP(ctx context.Context, a LSPArgs) (LSPResult, error) {
	var r LSPResult
	err := c.Call(ctx, OpLSP, a, nil, nil, &r)
	return r, err
}

// UsageArgs chooses what OpUsage measures: the sandbox's cgroup (cheap) always, the
// workspace tree (a walk) when Disk.
type UsageArgs struct {
	Disk bool `json:"disk,omitempty"`
}

// DiskUsage is what the sandbox uses: its cgroup's counters (as the kernel keeps them
// for the container the agent runs in; zero where they can't be read) and, when
// asked, what the workspace tree holds.
type DiskUsage struct {
	Bytes   int64 `json:"bytes"`   // the regular files' sizes, summed
	Files   int64 `json:"files"`   // entries walked
	Partial bool  `json:"partial"` // the walk stopped at MaxUsageEntries

	CPUSeconds      float64 `json:"cpuSeconds"`
	MemoryBytes     int64   `json:"memoryBytes"`
	MemoryPeakBytes int64   `json:"memoryPeakBytes"`
	Processes       int     `json:"processes"`
	Cgroup          bool    `json:"cgroup"` // the cgroup counters were read
}

// OpUsage walks the workspace and sums its files.
const OpUsage = "usage"

// MaxUsageEntries bounds the walk of OpUsage.
const MaxUsageEntries = 500_000

// Usage returns what the sandbox uses (and with a.Disk, what its tree holds).
func (c *Client) Usage(ctx context.Context, a UsageArgs) (DiskUsage, error) {
	var r DiskUsage
	err := c.Call(ctx, OpUsage, a, nil, nil, &r)
	return r, err
}
