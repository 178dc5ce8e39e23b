package main

import (
	"context"
	"fmt"

	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/sandbox/agent"
)

func init() {
	sections = append(sections, section{
		Name:  "launch",
		Order: 20,
		Doc:   "exec `true` through the agent, directly vs through the Landlock launcher (allowedCommands)",
		Run:   benchLaunch,
	})
	ratios = append(ratios, ratio{Num: "exec true, launcher", Den: "exec true, direct"})
}

// benchLaunch measures what the launcher adds to a command: the agent binary started
// once more, the allowed programs resolved, a Landlock ruleset built and enforced, then
// the exec of the command itself.
func benchLaunch(ctx context.Context, e *env) ([]bench.Row, error) {
	b, err := e.sandbox(ctx)
	if err != nil {
		return nil, err
	}
	p, err := b.Client.Ping(ctx)
	if err != nil {
		return nil, err
	}
	exec := func(launch *agent.ExecPolicy) func(context.Context) error {
		return func(ctx context.Context) error {
			r, err := b.Client.Exec(ctx, agent.ExecArgs{Argv: []string{"true"}, Launch: launch}, nil, nil)
			if err == nil && (r.ExitCode != 0 || r.StartError != "") {
				err = fmt.Errorf("true: exit %d, %s", r.ExitCode, r.StartError)
			}
			if err == nil && launch != nil && r.Unenforced {
				err = fmt.Errorf("the sandbox has no Landlock (ping: ABI %d): nothing to measure", p.Landlock)
			}
			return err
		}
	}
	runs := []struct {
		name, note string
		launch     *agent.ExecPolicy
	}{
		{"exec true, direct", "no allowedCommands: the agent starts the command itself", nil},
		{"exec true, launcher", fmt.Sprintf("allowedCommands [true git python3]: via `cws-agent launch`, Landlock ABI %d", p.Landlock),
			&agent.ExecPolicy{Programs: []string{"true", "git", "python3"}, Dirs: []string{"/usr/lib/git-core"}}},
	}
	var rows []bench.Row
	for _, r := range runs {
		n := e.iterations(500)
		e.logf("%s × %d…", r.name, n)
		samples, err := bench.Run(ctx, 20, n, exec(r.launch))
		row := bench.Summarize(r.name, samples)
		row.Note = r.note
		rows = append(rows, row)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", r.name, err)
		}
	}
	return rows, nil
}
