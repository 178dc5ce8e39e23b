// Command cws-bench measures cws's sandbox paths against the real Docker engine and
// prints the results as a markdown table (what `make bench` runs):
//
//	go run ./cmd/cws-bench [-image IMAGE] [-agent PATH] [-n SCALE] [-only a,b] [-transport auto|socket|exec] [-local-reads=false] [-list]
//	go run ./cmd/cws-bench -only mcpproc [-cws bin/cws] [-proc-stores embedded,redis] [-cws-pprof 127.0.0.1:6061]
//
// Each measurement is a section (see section.go); sections share one sandbox of the
// chosen image, created on first use and removed at the end. Progress goes to stderr,
// the table to stdout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/sandbox/agent/server"
	"github.com/cwsdev/cws/sandbox/docker"
	"github.com/cwsdev/cws/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cws-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cws-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	image := fs.String("image", version.WorkspaceImage, "image of the benchmark sandboxes")
	agentBin := fs.String("agent", "", "static cws-agent binary; empty builds one (CGO_ENABLED=0 go build)")
	scale := fs.Float64("n", 1, "scale every section's iteration count by this factor (e.g. 0.1 for a smoke run)")
	only := fs.String("only", "", "comma-separated sections to run; empty runs all (see -list)")
	list := fs.Bool("list", false, "list the sections and exit")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process (the in-process cws and the clients) to `file`")
	transport := fs.String("transport", docker.TransportAuto, "path to the agents: auto, socket or exec (docker.Config.Transport)")
	localReads := fs.Bool("local-reads", true, "let the in-process cws answer reads through the workspace root agents send on the socket path, as cws serve does by default (--local-reads)")
	cwsBin := fs.String("cws", "", "cws binary the mcpproc section runs as `cws serve`; empty builds one (CGO_ENABLED=0 go build)")
	procStores := fs.String("proc-stores", "embedded,redis", "session stores the mcpproc section runs cws serve with: embedded, redis (a private redis-server)")
	cwsPprof := fs.String("cws-pprof", "", "mcpproc: give cws serve a debug listener at this loopback `addr` (CWS_PPROF_ADDR) and write CPU and allocation profiles of each measurement to -cws-profile-dir")
	cwsProfileDir := fs.String("cws-profile-dir", ".", "mcpproc: directory of the profiles -cws-pprof takes")
	cwsLogDir := fs.String("cws-log-dir", "", "mcpproc: keep cws serve's log (stderr and stdout) in this directory, as cws-STORE.log; empty: a temporary one")
	cwsEnv := fs.String("cws-env", "", "mcpproc: comma-separated KEY=VALUE settings for cws serve's environment alone, e.g. GOGC=200 (this process keeps its own)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *scale <= 0 {
		return fmt.Errorf("-n must be positive, got %g", *scale)
	}
	if *list {
		for _, s := range ordered() {
			fmt.Fprintf(stdout, "%-10s %s\n", s.Name, s.Doc)
		}
		for _, k := range slices.Sorted(maps.Keys(aliases)) {
			fmt.Fprintf(stdout, "%-10s the sections %s\n", k, strings.Join(aliases[k], " and "))
		}
		return nil
	}
	chosen, err := choose(*only)
	if err != nil {
		return err
	}

	if *agentBin == "" {
		dir, err := os.MkdirTemp("", "cws-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		fmt.Fprintln(stderr, "bench: building cws-agent…")
		if *agentBin, err = buildAgent(ctx, dir); err != nil {
			return err
		}
	}
	d, err := docker.New(docker.Config{AgentBinary: *agentBin, StopTimeout: time.Second, Instance: "bench", Transport: *transport})
	if err != nil {
		return err
	}
	defer d.Close()
	name, why := d.Transport()
	fmt.Fprintf(stderr, "bench: agent transport %s: %s\n", name, why)
	// The exec stream, beside whatever path d takes, for the read section's anchor.
	execDriver, err := docker.New(docker.Config{AgentBinary: *agentBin, StopTimeout: time.Second, Instance: "bench", Transport: docker.TransportExec})
	if err != nil {
		return err
	}
	defer execDriver.Close()
	e := &env{driver: d, execDriver: execDriver, transport: name, agentBin: *agentBin, image: *image, scale: *scale, progress: stderr}
	if *localReads {
		e.localReads = server.OpenLocal
	}
	e.cwsBin, e.cwsPprof, e.cwsProfileDir, e.cwsLogDir = *cwsBin, *cwsPprof, *cwsProfileDir, *cwsLogDir
	for kv := range strings.SplitSeq(*cwsEnv, ",") {
		if kv = strings.TrimSpace(kv); kv != "" {
			if !strings.Contains(kv, "=") {
				return fmt.Errorf("-cws-env %q: want KEY=VALUE", kv)
			}
			e.cwsEnv = append(e.cwsEnv, kv)
		}
	}
	for st := range strings.SplitSeq(*procStores, ",") {
		if st = strings.TrimSpace(st); st != "" {
			e.procStores = append(e.procStores, st)
		}
	}
	defer e.close(ctx)

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var rows []bench.Row
	for _, s := range chosen {
		e.logf("section %s", s.Name)
		r, err := s.Run(ctx, e)
		rows = append(rows, r...)
		if err != nil {
			return fmt.Errorf("section %s: %w", s.Name, err)
		}
	}
	fmt.Fprintf(stdout, "cws %s, image %s, %s\n\n", version.Version, *image, host())
	var goalsTable strings.Builder
	if ok, _ := writeGoals(&goalsTable, rows); ok {
		fmt.Fprintf(stdout, "Goals, each figure beside its anchor measured in this run:\n\n%s\nEvery measurement:\n\n", goalsTable.String())
	}
	if err := bench.WriteTable(stdout, rows); err != nil {
		return err
	}
	for _, r := range ratios {
		if line, ok := r.line(rows); ok {
			fmt.Fprintln(stdout)
			fmt.Fprintln(stdout, line)
		}
	}
	return nil
}

// choose returns the sections named in only (comma-separated), or all of them.
func choose(only string) ([]section, error) {
	all := ordered()
	if only == "" {
		return all, nil
	}
	var out []section
	for name := range strings.SplitSeq(only, ",") {
		name = strings.TrimSpace(name)
		names := []string{name}
		if a, ok := aliases[name]; ok {
			names = a
		}
		for _, name := range names {
			i := slices.IndexFunc(all, func(s section) bool { return s.Name == name })
			if i < 0 {
				have := make([]string, len(all))
				for j, s := range all {
					have[j] = s.Name
				}
				return nil, fmt.Errorf("no section %q (have %s; and %s)", name, strings.Join(have, ", "), aliasList())
			}
			if !slices.ContainsFunc(out, func(s section) bool { return s.Name == name }) {
				out = append(out, all[i])
			}
		}
	}
	return out, nil
}

// aliases name groups of sections, as issues and docs name them: mcpload is the call
// load (one session's p50, 50 sessions from cws's own process and from a separate one)
// with the read section, which measures the p50's anchor (docker exec cat).
var aliases = map[string][]string{"mcpload": {"read", "mcp", "mcpproc"}}

func aliasList() string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(aliases)) {
		out = append(out, k+" = "+strings.Join(aliases[k], "+"))
	}
	return strings.Join(out, ", ")
}

// buildAgent builds the static agent into dir, from the module the command runs in.
func buildAgent(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "cws-agent")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "github.com/cwsdev/cws/cmd/cws-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build cws-agent (or pass -agent): %v\n%s", err, b)
	}
	return out, nil
}
