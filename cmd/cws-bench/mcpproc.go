package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/internal/bench"
	"golang.org/x/sync/errgroup"
)

// The mcpproc section measures what a deployment sees: `cws serve` in a process of its
// own (built from this module, or -cws), reached over loopback TCP by the clients in
// this process, each a raw JSON-RPC tools/call over Streamable HTTP on a keep-alive
// connection. Unlike the mcp section, cws's CPU is cws's alone (read from /proc), and
// nothing of the clients' work is counted in it. It runs once per store (-proc-stores):
// the embedded store (--dev's and a single node's) and Redis (a production install's,
// a private redis-server started for the run). Figures only; nothing is asserted.

const (
	procSessions = 50  // concurrent sessions, one client goroutine each
	procCalls    = 200 // readFile calls per session (scaled by -n)
	procTenant   = "bench"
	procIssuer   = "cws-bench"
)

func init() {
	sections = append(sections, section{
		Name:  "mcpproc",
		Order: 71,
		Doc:   "readFile 4 KiB over MCP to `cws serve` in its own process (embedded store, Redis): 50 sessions × 200 calls; calls/s, p50/p99, cws CPU per 1,000 calls",
		Run:   benchMCPProc,
	})
	goals = append(goals,
		goal{Order: 12, Figure: "throughput, 50 sessions, cws in its own process (embedded store)", Row: procRow("embedded", "/mcp"), MinRate: 10000},
		goal{Order: 13, Figure: "throughput, 50 sessions, cws in its own process (Redis)", Row: procRow("redis", "/mcp"), MinRate: 10000},
	)
}

func procRow(store, path string) string {
	return fmt.Sprintf("MCP readFile 4 KiB, %d sessions, cws process, %s store, %s", procSessions, store, path)
}

func benchMCPProc(ctx context.Context, e *env) ([]bench.Row, error) {
	dir, err := os.MkdirTemp("", "cws-bench-proc-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := e.cwsBin
	if bin == "" {
		e.logf("building cws…")
		if bin, err = buildCWS(ctx, dir); err != nil {
			return nil, err
		}
	}
	tenantsFile, tenant, err := procTenants(dir)
	if err != nil {
		return nil, err
	}
	var rows []bench.Row
	for _, store := range e.procStores {
		var redisURL string
		switch store {
		case "embedded":
		case "redis":
			url, stop, err := startRedis(ctx, dir)
			if err != nil {
				e.logf("Redis store skipped: %v", err)
				rows = append(rows, bench.Row{Name: procRow("redis", "/mcp"), Note: "not measured: " + err.Error()})
				continue
			}
			defer stop()
			redisURL = url
		default:
			return rows, fmt.Errorf("-proc-stores: unknown store %q (want embedded, redis)", store)
		}
		r, err := procRun(ctx, e, dir, bin, tenantsFile, tenant, store, redisURL)
		rows = append(rows, r...)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// buildCWS builds cws into dir, as make build does (static).
func buildCWS(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "cws")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "github.com/cwsdev/cws/cmd/cws")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build cws (or pass -cws): %v\n%s", err, b)
	}
	return out, nil
}

// procTenants writes a tenants file with one HS256 tenant (the default policy) and
// returns it with the tenant, to mint tokens with.
func procTenants(dir string) (string, *auth.Tenant, error) {
	var secret [32]byte
	_, _ = rand.Read(secret[:])
	file := filepath.Join(dir, "tenants.yaml")
	yaml := fmt.Sprintf("tenants:\n  - id: %s\n    issuer: %s\n    keys:\n      - {kid: b1, alg: HS256, secret: %q}\n", procTenant, procIssuer, hex.EncodeToString(secret[:]))
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		return "", nil, err
	}
	ts, err := auth.LoadTenants(file)
	if err != nil {
		return "", nil, err
	}
	return file, ts.Get(procTenant), nil
}

// startRedis starts a private redis-server (persistence off) on a free port.
func startRedis(ctx context.Context, dir string) (string, func(), error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, errors.New("no redis-server on PATH")
	}
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return "redis://" + addr + "/0", stop, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return "", nil, fmt.Errorf("redis-server on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// cwsProc is a running `cws serve`.
type cwsProc struct {
	cmd  *exec.Cmd
	base string
	log  string // its stderr and stdout
	done chan struct{}
}

// startCWS starts cws serve with the tenants file and store, and waits until /readyz
// answers 200. The instance label is the run's own: this cws reconciles and reaps
// only the sandboxes it made.
func startCWS(ctx context.Context, e *env, dir, bin, tenantsFile, store, redisURL string) (*cwsProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{"serve", "--tenants", tenantsFile, "--addr", addr, "--instance", session(),
		"--agent-binary", e.agentBin, "--default-image", e.image, "--agent-transport", e.transport,
		"--log-format", "json", "--local-reads=" + strconv.FormatBool(e.localReads != nil)}
	if redisURL != "" {
		args = append(args, "--redis-url", redisURL)
	}
	logFile := filepath.Join(cmp.Or(e.cwsLogDir, dir), "cws-"+store+".log")
	lf, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = os.Environ() // GOGC, GOMAXPROCS, CWS_PPROF_ADDR … pass through
	if e.cwsPprof != "" {
		cmd.Env = append(cmd.Env, "CWS_PPROF_ADDR="+e.cwsPprof)
	}
	cmd.Env = append(cmd.Env, e.cwsEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	lf.Close()
	p := &cwsProc{cmd: cmd, base: "http://" + addr, log: logFile, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	e.logf("cws serve (%s store) pid %d on %s; waiting for /readyz…", store, cmd.Process.Pid, addr)
	for deadline := time.Now().Add(60 * time.Second); ; {
		resp, err := http.Get(p.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("cws serve exited: %s", p.tail())
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("cws serve not ready in 60 s: %s", p.tail())
		}
	}
}

// stop sends SIGTERM and waits (then SIGKILL).
func (p *cwsProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail is the end of cws's log.
func (p *cwsProc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// cpu is the process's user+system CPU time so far, from /proc/<pid>/stat.
func (p *cwsProc) cpu() (time.Duration, error) {
	return procCPU(p.cmd.Process.Pid)
}

// procCPU reads utime+stime of pid (clock ticks of 1/100 s: USER_HZ on Linux).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("malformed /proc stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// selfCPU is this process's CPU time so far (the clients').
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procSession is one benchmark session with its tokens.
type procSession struct {
	id      string
	bound   string // token with the session claim: /mcp reaches this session
	unbound string // token of the same subject without it, for /v1/sessions/{id}/mcp
	mcpURL  string // as the create response names it
}

func procRun(ctx context.Context, e *env, dir, bin, tenantsFile string, tenant *auth.Tenant, store, redisURL string) ([]bench.Row, error) {
	p, err := startCWS(ctx, e, dir, bin, tenantsFile, store, redisURL)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	transport := &http.Transport{MaxIdleConns: 200, MaxIdleConnsPerHost: 200, IdleConnTimeout: time.Minute}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 2 * time.Minute}

	// Sessions: created over REST, 10 at a time (cold creates queue in the engine).
	sessions := make([]*procSession, procSessions)
	e.logf("creating %d sessions (%s store)…", procSessions, store)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(10)
	for i := range sessions {
		g.Go(func() error {
			sub := fmt.Sprintf("bench-%d", i)
			unbound, err := tenant.Mint(sub, 2*time.Hour, "", nil, time.Now())
			if err != nil {
				return err
			}
			s, err := procCreate(gctx, client, p.base, unbound)
			if err != nil {
				return err
			}
			s.unbound = unbound
			sessions[i] = s
			if s.bound, err = tenant.Mint(sub, 2*time.Hour, s.id, nil, time.Now()); err != nil {
				return err
			}
			content := strings.Repeat("0123456789abcdef", 256) // 4 KiB
			return procWrite(gctx, client, p.base+"/mcp", s.bound, content)
		})
	}
	err = g.Wait()
	defer func() {
		e.logf("deleting the sessions…")
		var dg errgroup.Group
		dg.SetLimit(10)
		for _, s := range sessions {
			if s == nil {
				continue
			}
			dg.Go(func() error {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, p.base+"/v1/sessions/"+s.id, nil)
				req.Header.Set("Authorization", "Bearer "+s.unbound)
				resp, err := client.Do(req)
				if err != nil {
					e.logf("delete session %s: %v", s.id, err)
					return nil
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					e.logf("delete session %s: HTTP %d", s.id, resp.StatusCode)
				}
				return nil
			})
		}
		_ = dg.Wait()
	}()
	if err != nil {
		return nil, fmt.Errorf("sessions: %w (cws log: %s)", err, p.tail())
	}

	var rows []bench.Row
	for _, path := range []string{"/mcp", "/v1/sessions/{id}/mcp"} {
		name := procRow(store, path)
		per := e.iterations(procCalls)
		e.logf("%s: %d × %d calls…", name, procSessions, per)
		calls := make([]func(context.Context) error, len(sessions))
		for i, s := range sessions {
			if path == "/mcp" {
				calls[i] = rawReadFile(&http.Client{Transport: transport}, p.base+"/mcp", s.bound)
			} else {
				calls[i] = rawReadFile(&http.Client{Transport: transport}, s.mcpURL, s.unbound)
			}
		}
		row, err := procMeasure(ctx, e, p, name, calls, per)
		if err != nil {
			return rows, fmt.Errorf("%s: %w (cws log: %s)", name, err, p.tail())
		}
		row.Note += fmt.Sprintf("; %s store", store)
		rows = append(rows, row)
	}
	return rows, nil
}

// procMeasure runs every session's calls at once, after a warm-up of 5 each, and
// times the measured part alone: wall, samples, and cws's and the clients' CPU.
func procMeasure(ctx context.Context, e *env, p *cwsProc, name string, calls []func(context.Context) error, per int) (bench.Row, error) {
	var (
		mu       sync.Mutex
		samples  []time.Duration
		firstErr error
	)
	all := func(warmup, n int) {
		var wg sync.WaitGroup
		for _, call := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := bench.Run(ctx, warmup, n, call)
				mu.Lock()
				defer mu.Unlock()
				samples = append(samples, got...)
				if err != nil && firstErr == nil {
					firstErr = err
				}
			}()
		}
		wg.Wait()
	}
	all(5, 0)
	if firstErr != nil {
		return bench.Row{}, firstErr
	}
	var prof *profileGrab
	if e.cwsPprof != "" && e.cwsProfileDir != "" {
		// For most of the measured part: it lasts about n/3,000 s or more.
		secs := max(1, len(calls)*per*8/30000)
		prof = grabProfile(e, "http://"+e.cwsPprof, secs, filepath.Join(e.cwsProfileDir, strings.NewReplacer(" ", "_", "/", "_", ",", "", "{", "", "}", "").Replace(name)))
	}
	cpu0, err := p.cpu()
	if err != nil {
		return bench.Row{}, err
	}
	self0 := selfCPU()
	wait := watchCPU()
	start := time.Now()
	all(0, per)
	wall := time.Since(start)
	self := selfCPU() - self0
	cpu1, err := p.cpu()
	if err != nil {
		return bench.Row{}, err
	}
	if prof != nil {
		prof.wait()
	}
	if firstErr != nil {
		return bench.Row{}, firstErr
	}
	row := bench.Summarize(name, samples)
	row.Rate = float64(len(samples)) / wall.Seconds()
	k := float64(len(samples)) / 1000
	cws := cpu1 - cpu0
	row.Note = fmt.Sprintf("%.0f calls/s; cws %.0f ms CPU per 1,000 calls (%.2f cores), clients %.0f ms per 1,000; raw JSON-RPC, keep-alive",
		row.Rate, float64(cws.Milliseconds())/k, cws.Seconds()/wall.Seconds(), float64(self.Milliseconds())/k)
	if self > 0 {
		// The clients' code is the same in every build of cws: on a machine that gives
		// less per CPU second (others' load), both figures grow, and this ratio does not.
		row.Note += fmt.Sprintf("; cws/clients CPU %.2f", cws.Seconds()/self.Seconds())
	}
	if note := wait.note(); note != "" {
		row.Note += "; " + note
	}
	e.logf("%s: %.0f calls/s, p50 %s, p90 %s, p99 %s, cws %.0f ms CPU/1k calls, clients %.0f ms/1k; %s", name, row.Rate, bench.Format(row.P50), bench.Format(row.P90), bench.Format(row.P99),
		float64(cws.Milliseconds())/k, float64(self.Milliseconds())/k, wait.note())
	return row, nil
}

// procCreate creates a session over REST.
func procCreate(ctx context.Context, c *http.Client, base, token string) (*procSession, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/sessions", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return nil, fmt.Errorf("POST /v1/sessions: HTTP %d: %.300s", resp.StatusCode, b)
	}
	var v struct {
		ID     string `json:"id"`
		MCPURL string `json:"mcpUrl"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.ID == "" || v.MCPURL == "" {
		return nil, fmt.Errorf("POST /v1/sessions: %.300s", b)
	}
	return &procSession{id: v.ID, mcpURL: v.MCPURL}, nil
}

// procWrite writes the file every call reads, with a raw tools/call.
func procWrite(ctx context.Context, c *http.Client, endpoint, token, content string) error {
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"writeFile","arguments":{"path":"f4k","contents":"` + content + `"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"result"`)) || bytes.Contains(b, []byte(`"isError":true`)) {
		return fmt.Errorf("writeFile: HTTP %d: %.300s", resp.StatusCode, b)
	}
	return nil
}

// profileGrab fetches CPU and allocation profiles of cws over its debug listener
// (CWS_PPROF_ADDR) while the measured part runs.
type profileGrab struct{ done chan struct{} }

func (g *profileGrab) wait() { <-g.done }

func grabProfile(e *env, base string, secs int, prefix string) *profileGrab {
	g := &profileGrab{done: make(chan struct{})}
	fetch := func(path, file string) {
		resp, err := http.Get(base + path)
		if err != nil {
			e.logf("profile %s: %v", path, err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(file)
		if err != nil {
			e.logf("profile %s: %v", path, err)
			return
		}
		defer f.Close()
		w := bufio.NewWriter(f)
		_, _ = io.Copy(w, resp.Body)
		_ = w.Flush()
		e.logf("wrote %s", file)
	}
	go func() {
		defer close(g.done)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			fetch(fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), prefix+".cpu.pprof")
		}()
		go func() {
			defer wg.Done()
			fetch(fmt.Sprintf("/debug/pprof/allocs?seconds=%d", secs), prefix+".allocs.pprof")
		}()
		wg.Wait()
	}()
	return g
}
