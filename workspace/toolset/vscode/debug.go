package vscode

import (
	"context"
	"slices"
	"time"

	"github.com/cwsdev/cws/workspace/tool"
)

func debugTools() []*tool.Tool {
	return []*tool.Tool{
		def("toggle_debugger_breakpoint", "Toggle breakpoint", "Toggle a line breakpoint (1-based line) in a project file. Breakpoints are session state. Returns \"Breakpoint added\" or \"Breakpoint removed\".",
			tool.Write, toggleBreakpoint),
		def("get_debugger_breakpoints", "Breakpoints", "All line breakpoints of the session: path and 1-based line.", tool.Read, getBreakpoints),
		def("get_run_configurations", "Run configurations", "The names of the run configurations: .vscode/launch.json configurations, .vscode/tasks.json tasks, Makefile targets (\"make TARGET\") and package.json scripts (\"npm run SCRIPT\").",
			tool.Read, getRunConfigurations),
		def("run_configuration", "Run configuration", "Start a run configuration as a background process (same command policy as startProcess); it shows in get_progress_indicators and listProcesses. Returns \"Run configuration started\".",
			tool.Runs, runConfiguration),
	}
}

// breakpointsKey is the session state key of the breakpoints.
const breakpointsKey = "vscode.breakpoints"

type Breakpoint struct {
	Path string `json:"path" jsonschema:"Absolute path in the container."`
	Line int    `json:"line" jsonschema:"1-based."`
}

type BreakpointArgs struct {
	PathArg
	Line int `json:"line" jsonschema:"The line number where to toggle the breakpoint (1-based)."`
}

func (c *call) breakpoints(ctx context.Context) ([]Breakpoint, error) {
	bps := []Breakpoint{}
	if _, err := c.env.State().Get(ctx, breakpointsKey, &bps); err != nil {
		return nil, err
	}
	return bps, nil
}

func toggleBreakpoint(ctx context.Context, c *call, a *BreakpointArgs) (*string, error) {
	if a.Line < 1 {
		return nil, tool.Invalidf("line", "line must be 1 or more (1-based)")
	}
	r, err := rel(a.PathInProject)
	if err != nil {
		return nil, err
	}
	if r, err = c.core.Resolve(r, false, 0); err != nil {
		return nil, err
	}
	bps, err := c.breakpoints(ctx)
	if err != nil {
		return nil, err
	}
	bp := Breakpoint{Path: abs(r), Line: a.Line}
	msg := "Breakpoint added"
	if i := slices.Index(bps, bp); i >= 0 {
		bps, msg = slices.Delete(bps, i, i+1), "Breakpoint removed"
	} else {
		bps = append(bps, bp)
	}
	if err := c.env.State().Put(ctx, breakpointsKey, bps); err != nil {
		return nil, err
	}
	return &msg, nil
}

func getBreakpoints(ctx context.Context, c *call, _ *NoArgs) (*[]Breakpoint, error) {
	bps, err := c.breakpoints(ctx)
	if err != nil {
		return nil, err
	}
	return &bps, nil
}

func getRunConfigurations(ctx context.Context, c *call, _ *NoArgs) (*[]string, error) {
	rcs, err := c.runConfigs(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(rcs))
	for _, rc := range rcs {
		names = append(names, rc.Name)
	}
	return &names, nil
}

type RunConfigArgs struct {
	ConfigName string `json:"configName" jsonschema:"The name of the run configuration to execute."`
}

func runConfiguration(ctx context.Context, c *call, a *RunConfigArgs) (*string, error) {
	rcs, err := c.runConfigs(ctx)
	if err != nil {
		return nil, err
	}
	for _, rc := range rcs {
		if rc.Name == a.ConfigName {
			if err := c.start(ctx, rc); err != nil {
				return nil, err
			}
			return ptr("Run configuration started"), nil
		}
	}
	return nil, fail("not_found", "run configuration not found: %s", a.ConfigName)
}

// jobsKey is the session state key of the jobs run configurations and actions started.
const jobsKey = "vscode.jobs"

// maxJobs is how many job records a session keeps (the newest).
const maxJobs = 100

// Job is a background process a vscode tool started, with its title.
type Job struct {
	ProcessID string    `json:"processId"`
	Title     string    `json:"title"`
	Source    string    `json:"source"`
	StartedAt time.Time `json:"startedAt"`
}

// start starts a run configuration as a background process and records it as a job.
func (c *call) start(ctx context.Context, rc runConfig) error {
	if rc.Err != "" {
		return fail("unsupported", "%s: %s", rc.Name, rc.Err)
	}
	p, err := c.core.StartArgv(ctx, rc.Argv, rc.Cwd, rc.Env)
	if err != nil {
		return err
	}
	var jobs []Job
	if _, err := c.env.State().Get(ctx, jobsKey, &jobs); err != nil {
		return err
	}
	jobs = append(jobs, Job{ProcessID: p.ID, Title: rc.Name, Source: rc.Source, StartedAt: time.Now().UTC()})
	if len(jobs) > maxJobs {
		jobs = jobs[len(jobs)-maxJobs:]
	}
	return c.env.State().Put(ctx, jobsKey, jobs)
}
