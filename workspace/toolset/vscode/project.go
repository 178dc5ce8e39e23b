package vscode

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/tool"
	"github.com/cwsdev/cws/workspace/toolset/core"
)

func projectTools() []*tool.Tool {
	return []*tool.Tool{
		def("get_project_modules", "Project modules", "The project's types, detected from manifest files at its root (node, python, go, rust, java, …), and the extensions .vscode/extensions.json recommends.",
			tool.Read, getProjectModules),
		def("get_project_dependencies", "Project dependencies", "The project's dependencies from package.json, requirements.txt, go.mod, pyproject.toml and Cargo.toml: the first as {type, dependencies, devDependencies}, and every manifest in projects, each with its type.",
			tool.Read, getProjectDependencies),
	}
}

// projectTypes maps a root file to the project type it shows.
var projectTypes = []struct{ file, typ string }{
	{"package.json", "node"}, {"tsconfig.json", "typescript"},
	{"requirements.txt", "python"}, {"pyproject.toml", "python"}, {"setup.py", "python"}, {"Pipfile", "python"},
	{"go.mod", "go"}, {"Cargo.toml", "rust"},
	{"pom.xml", "java"}, {"build.gradle", "java"}, {"build.gradle.kts", "java"},
	{"composer.json", "php"}, {"Gemfile", "ruby"}, {"CMakeLists.txt", "cpp"}, {"mix.exs", "elixir"},
	{"pubspec.yaml", "dart"}, {"Package.swift", "swift"}, {"deno.json", "deno"},
}

type Modules struct {
	Types      []string `json:"types"`
	Extensions []string `json:"extensions"`
}

func getProjectModules(ctx context.Context, c *call, _ *NoArgs) (*Modules, error) {
	l, err := c.core.ListFiles(ctx, &core.ListFilesArgs{Path: "."})
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, e := range l.Entries {
		if e.Type != agent.TypeDir {
			names[e.Name] = true
		}
	}
	res := &Modules{Types: []string{}, Extensions: []string{}}
	for _, pt := range projectTypes {
		if names[pt.file] && !slices.Contains(res.Types, pt.typ) {
			res.Types = append(res.Types, pt.typ)
		}
	}
	for n := range names {
		if (strings.HasSuffix(n, ".csproj") || strings.HasSuffix(n, ".sln")) && !slices.Contains(res.Types, "dotnet") {
			res.Types = append(res.Types, "dotnet")
		}
	}
	if text, ok, err := c.readOptional(ctx, ".vscode/extensions.json"); err != nil {
		return nil, err
	} else if ok {
		var f struct {
			Recommendations []string `json:"recommendations"`
		}
		if err := jsonc(text, &f); err != nil {
			return nil, fail("invalid_config", ".vscode/extensions.json: %v", err)
		}
		res.Extensions = append(res.Extensions, f.Recommendations...)
	}
	return res, nil
}

// Dependencies are one manifest's dependencies: name → version or requirement.
type Dependencies struct {
	Type            string            `json:"type" jsonschema:"node, python, go or rust."`
	File            string            `json:"file,omitempty" jsonschema:"The manifest, relative to the project root."`
	Dependencies    map[string]string `json:"dependencies"`
	DevDependencies map[string]string `json:"devDependencies"`
}

type ProjectDependencies struct {
	Dependencies
	Projects []Dependencies `json:"projects" jsonschema:"cws extension: every manifest found."`
}

// manifests are the files read, and how.
var manifests = []struct {
	file, typ string
	parse     func(text string, d *Dependencies) error
}{
	{"package.json", "node", parsePackageJSON},
	{"requirements.txt", "python", parseRequirements},
	{"pyproject.toml", "python", parsePyproject},
	{"go.mod", "go", parseGoMod},
	{"Cargo.toml", "rust", parseCargo},
}

func getProjectDependencies(ctx context.Context, c *call, _ *NoArgs) (*ProjectDependencies, error) {
	res := &ProjectDependencies{Dependencies: Dependencies{Type: "unknown", Dependencies: map[string]string{}, DevDependencies: map[string]string{}}, Projects: []Dependencies{}}
	for _, m := range manifests {
		text, ok, err := c.readOptional(ctx, m.file)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		d := Dependencies{Type: m.typ, File: m.file, Dependencies: map[string]string{}, DevDependencies: map[string]string{}}
		if err := m.parse(text, &d); err != nil {
			return nil, fail("invalid_manifest", "%s: %v", m.file, err)
		}
		res.Projects = append(res.Projects, d)
	}
	if len(res.Projects) > 0 {
		res.Dependencies = res.Projects[0]
		res.Dependencies.File = ""
	}
	return res, nil
}

func parsePackageJSON(text string, d *Dependencies) error {
	var f struct {
		Dependencies    map[string]string `json:"dependencies"`
		DevDependencies map[string]string `json:"devDependencies"`
	}
	if err := json.Unmarshal([]byte(text), &f); err != nil {
		return err
	}
	for k, v := range f.Dependencies {
		d.Dependencies[k] = v
	}
	for k, v := range f.DevDependencies {
		d.DevDependencies[k] = v
	}
	return nil
}

// requirement splits a PEP 508 requirement ("requests>=2.0; python_version>'3'") into
// its name and version specifier ("*" when none).
func requirement(line string) (string, string) {
	line, _, _ = strings.Cut(line, ";")
	line = strings.TrimSpace(line)
	i := strings.IndexAny(line, "<>=!~ [(@")
	if i < 0 {
		return line, "*"
	}
	name, spec := line[:i], strings.TrimSpace(line[i:])
	if strings.HasPrefix(spec, "[") { // extras
		if j := strings.IndexByte(spec, ']'); j >= 0 {
			spec = strings.TrimSpace(spec[j+1:])
		}
	}
	if spec == "" {
		spec = "*"
	}
	return name, spec
}

func parseRequirements(text string, d *Dependencies) error {
	for _, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "#")
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "-") {
			continue
		}
		name, spec := requirement(line)
		d.Dependencies[name] = spec
	}
	return nil
}

func parsePyproject(text string, d *Dependencies) error {
	var f struct {
		Project struct {
			Dependencies         []string            `toml:"dependencies"`
			OptionalDependencies map[string][]string `toml:"optional-dependencies"`
		} `toml:"project"`
		DependencyGroups map[string][]any `toml:"dependency-groups"`
		Tool             struct {
			Poetry struct {
				Dependencies    map[string]any `toml:"dependencies"`
				DevDependencies map[string]any `toml:"dev-dependencies"`
				Group           map[string]struct {
					Dependencies map[string]any `toml:"dependencies"`
				} `toml:"group"`
			} `toml:"poetry"`
		} `toml:"tool"`
	}
	if err := toml.Unmarshal([]byte(text), &f); err != nil {
		return err
	}
	for _, r := range f.Project.Dependencies {
		n, s := requirement(r)
		d.Dependencies[n] = s
	}
	for _, rs := range f.Project.OptionalDependencies {
		for _, r := range rs {
			n, s := requirement(r)
			d.DevDependencies[n] = s
		}
	}
	for _, rs := range f.DependencyGroups {
		for _, r := range rs {
			if s, ok := r.(string); ok {
				n, spec := requirement(s)
				d.DevDependencies[n] = spec
			}
		}
	}
	for n, v := range f.Tool.Poetry.Dependencies {
		if n != "python" {
			d.Dependencies[n] = version(v)
		}
	}
	for n, v := range f.Tool.Poetry.DevDependencies {
		d.DevDependencies[n] = version(v)
	}
	for _, g := range f.Tool.Poetry.Group {
		for n, v := range g.Dependencies {
			d.DevDependencies[n] = version(v)
		}
	}
	return nil
}

// version is a TOML dependency's version: "1.0", or a table's version (or its git,
// path).
func version(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case map[string]any:
		for _, k := range []string{"version", "git", "path"} {
			if s, ok := v[k].(string); ok {
				return s
			}
		}
		if w, ok := v["workspace"].(bool); ok && w {
			return "workspace"
		}
	}
	return "*"
}

func parseGoMod(text string, d *Dependencies) error {
	inBlock := false
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		indirect := strings.Contains(line, "// indirect")
		line, _, _ = strings.Cut(line, "//")
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimSpace(strings.TrimPrefix(line, "require "))
		case !inBlock:
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if indirect {
			d.DevDependencies[f[0]] = f[1] // go.mod has no dev dependencies: the indirect ones are listed here
		} else {
			d.Dependencies[f[0]] = f[1]
		}
	}
	return nil
}

func parseCargo(text string, d *Dependencies) error {
	var f struct {
		Dependencies      map[string]any `toml:"dependencies"`
		DevDependencies   map[string]any `toml:"dev-dependencies"`
		BuildDependencies map[string]any `toml:"build-dependencies"`
	}
	if err := toml.Unmarshal([]byte(text), &f); err != nil {
		return fmt.Errorf("%w", err)
	}
	for n, v := range f.Dependencies {
		d.Dependencies[n] = version(v)
	}
	for _, m := range []map[string]any{f.DevDependencies, f.BuildDependencies} {
		for n, v := range m {
			d.DevDependencies[n] = version(v)
		}
	}
	return nil
}
