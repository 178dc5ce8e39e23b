package vscode

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/tool"
	"github.com/cwsdev/cws/workspace/toolset/core"
	"github.com/cwsdev/cws/workspace/toolset/lsp"
)

func actionTools() []*tool.Tool {
	return []*tool.Tool{
		def("list_available_actions", "Actions", "The workspace actions execute_action_by_id runs: id (VS Code's) and text.", tool.Read, listAvailableActions),
		def("execute_action_by_id", "Execute action", "Execute an action by its VS Code id (see list_available_actions). Returns \"ok\", or \"action not found\". Actions that start a task return once it started.",
			tool.Runs, executeActionByID),
		def("get_progress_indicators", "Progress", "The running background jobs (run configurations, actions' tasks, background processes) with their titles and elapsed time; an empty array when none run.",
			tool.Read, getProgressIndicators),
	}
}

type Action struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// action is one catalogue entry and what it does.
type action struct {
	Action
	run func(ctx context.Context, c *call) error
}

// actions is the fixed catalogue.
var actions = []action{
	{Action{"workbench.action.files.save", "Save File"}, noop},
	{Action{"workbench.action.files.saveAll", "Save All Files"}, noop},
	{Action{"editor.action.formatDocument", "Format Document"}, formatDocument},
	{Action{"editor.action.organizeImports", "Organize Imports"}, organizeImports},
	{Action{"workbench.action.tasks.test", "Run Test Task"}, func(ctx context.Context, c *call) error { return c.runTask(ctx, "test") }},
	{Action{"workbench.action.tasks.build", "Run Build Task"}, func(ctx context.Context, c *call) error { return c.runTask(ctx, "build") }},
	{Action{"workbench.action.debug.start", "Start Debugging"}, startDebugging},
	{Action{"workbench.action.debug.run", "Run Without Debugging"}, startDebugging},
	{Action{"workbench.action.debug.stop", "Stop Debugging"}, stopJobs},
	{Action{"editor.debug.action.toggleBreakpoint", "Toggle Breakpoint"}, toggleBreakpointAtCursor},
	{Action{"workbench.debug.viewlet.action.removeAllBreakpoints", "Remove All Breakpoints"}, func(ctx context.Context, c *call) error {
		return c.env.State().Put(ctx, breakpointsKey, []Breakpoint{})
	}},
	{Action{"workbench.action.closeActiveEditor", "Close Editor"}, closeActiveEditor},
	{Action{"workbench.action.closeAllEditors", "Close All Editors"}, func(ctx context.Context, c *call) error {
		return c.saveEditor(ctx, &Editor{Sel: Selection{1, 1, 1, 1}})
	}},
}

func listAvailableActions(context.Context, *call, *NoArgs) (*[]Action, error) {
	out := make([]Action, 0, len(actions))
	for _, a := range actions {
		out = append(out, a.Action)
	}
	return &out, nil
}

type ActionArgs struct {
	ActionID string `json:"actionId" jsonschema:"The ID of the action to execute."`
}

func executeActionByID(ctx context.Context, c *call, a *ActionArgs) (*string, error) {
	for _, act := range actions {
		if act.ID == a.ActionID {
			if err := act.run(ctx, c); err != nil {
				return nil, err
			}
			return ptr("ok"), nil
		}
	}
	return ptr("action not found"), nil
}

// noop: files are edited on disk, there is nothing to save.
func noop(context.Context, *call) error { return nil }

// formatDocument formats the active file with its language server and applies the
// edits.
func formatDocument(ctx context.Context, c *call) error {
	e, err := c.activeEditor(ctx)
	if err != nil {
		return err
	}
	var edits []lsp.Edit
	if _, err := c.lspCall(ctx, "format_document", map[string]any{"file_path": e.Active}, &edits); err != nil {
		return err
	}
	if len(edits) == 0 {
		return nil
	}
	fe := core.FileEdits{Path: e.Active}
	for _, ed := range edits {
		fe.Edits = append(fe.Edits, core.TextEdit{StartLine: ed.Range.Start.Line, StartCharacter: ed.Range.Start.Character,
			EndLine: ed.Range.End.Line, EndCharacter: ed.Range.End.Character, NewText: ed.NewText})
	}
	_, err = core.ApplyEdits(ctx, c.env, []core.FileEdits{fe})
	return err
}

// organizeImports applies the language server's source.organizeImports action to the
// active file, if it offers one with edits.
func organizeImports(ctx context.Context, c *call) error {
	e, err := c.activeEditor(ctx)
	if err != nil {
		return err
	}
	text, err := c.readText(ctx, e.Active)
	if err != nil {
		return err
	}
	var acts []codeAction
	if _, err := c.lspCall(ctx, "get_code_actions", map[string]any{"file_path": e.Active, "start_line": 1, "start_character": 1,
		"end_line": lineCount(text), "end_character": 1, "kind_filter": "source"}, &acts); err != nil {
		return err
	}
	for _, ca := range acts {
		if (ca.Kind == "source.organizeImports" || strings.HasPrefix(ca.Kind, "source.organizeImports.")) && ca.Edit != nil && len(ca.Edit.Changes) > 0 {
			_, err := c.apply(ctx, *ca.Edit)
			return err
		}
	}
	return nil // nothing to organize
}

// runTask starts the workspace's task of a group (test, build): a tasks.json task of
// that group, else a Makefile target or package.json script of that name, else the
// project's usual command.
func (c *call) runTask(ctx context.Context, group string) error {
	rcs, err := c.runConfigs(ctx)
	if err != nil {
		return err
	}
	for _, rc := range rcs {
		if rc.Group == group {
			rc.Name = "Run " + group + " task: " + rc.Name
			return c.start(ctx, rc)
		}
	}
	mods, err := getProjectModules(ctx, c, nil)
	if err != nil {
		return err
	}
	defaults := map[string]map[string][]string{
		"test":  {"go": {"go", "test", "./..."}, "rust": {"cargo", "test"}, "node": {"npm", "test"}, "python": {"python3", "-m", "pytest"}},
		"build": {"go": {"go", "build", "./..."}, "rust": {"cargo", "build"}, "node": {"npm", "run", "build"}},
	}
	for _, t := range mods.Types {
		if argv, ok := defaults[group][t]; ok {
			return c.start(ctx, runConfig{Name: "Run " + group + " task: " + joinArgv(argv), Source: "action", Argv: argv, Cwd: "."})
		}
	}
	return fail("not_found", "no %s task: no tasks.json task in group %s, no %s target or script, and no known project type", group, group, group)
}

func joinArgv(argv []string) string {
	s := ""
	for i, a := range argv {
		if i > 0 {
			s += " "
		}
		s += a
	}
	return s
}

// startDebugging runs the first launch configuration.
func startDebugging(ctx context.Context, c *call) error {
	rcs, err := c.runConfigs(ctx)
	if err != nil {
		return err
	}
	for _, rc := range rcs {
		if rc.Source == "launch.json" {
			return c.start(ctx, rc)
		}
	}
	return fail("not_found", "no launch configuration in .vscode/launch.json")
}

// stopJobs stops the running jobs the vscode tools started.
func stopJobs(ctx context.Context, c *call) error {
	var jobs []Job
	if _, err := c.env.State().Get(ctx, jobsKey, &jobs); err != nil {
		return err
	}
	ps, err := c.env.Agent().ProcList(ctx)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if p.Running && slices.ContainsFunc(jobs, func(j Job) bool { return j.ProcessID == p.ID }) {
			if _, err := c.env.Agent().ProcKill(ctx, agent.ProcKillArgs{ID: p.ID}); err != nil {
				return err
			}
		}
	}
	return nil
}

func toggleBreakpointAtCursor(ctx context.Context, c *call) error {
	e, err := c.activeEditor(ctx)
	if err != nil {
		return err
	}
	_, err = toggleBreakpoint(ctx, c, &BreakpointArgs{PathArg: PathArg{PathInProject: e.Active}, Line: e.Sel.StartLine})
	return err
}

func closeActiveEditor(ctx context.Context, c *call) error {
	e, err := c.activeEditor(ctx)
	if err != nil {
		return err
	}
	e.Open = slices.DeleteFunc(e.Open, func(p string) bool { return p == e.Active })
	e.Active, e.Sel = "", Selection{1, 1, 1, 1}
	if len(e.Open) > 0 {
		e.Active = e.Open[len(e.Open)-1]
	}
	return c.saveEditor(ctx, e)
}

type Progress struct {
	ID        string `json:"id" jsonschema:"The background process id (readProcessOutput, killProcess)."`
	Title     string `json:"title"`
	Source    string `json:"source" jsonschema:"launch.json, tasks.json, Makefile, package.json, action, or process (started otherwise)."`
	Command   string `json:"command"`
	StartedAt string `json:"startedAt" jsonschema:"ISO 8601."`
	ElapsedMs int64  `json:"elapsedMs"`
}

func getProgressIndicators(ctx context.Context, c *call, _ *NoArgs) (*[]Progress, error) {
	var jobs []Job
	if _, err := c.env.State().Get(ctx, jobsKey, &jobs); err != nil {
		return nil, err
	}
	ps, err := c.env.Agent().ProcList(ctx)
	if err != nil {
		return nil, err
	}
	out := []Progress{}
	now := time.Now()
	for _, p := range ps {
		if !p.Running {
			continue
		}
		cmd := joinArgv(p.Argv)
		pr := Progress{ID: p.ID, Title: cmd, Source: "process", Command: cmd, StartedAt: p.StartedAt.UTC().Format(time.RFC3339), ElapsedMs: now.Sub(p.StartedAt).Milliseconds()}
		if i := slices.IndexFunc(jobs, func(j Job) bool { return j.ProcessID == p.ID }); i >= 0 {
			pr.Title, pr.Source = jobs[i].Title, jobs[i].Source
		}
		out = append(out, pr)
	}
	return &out, nil
}
