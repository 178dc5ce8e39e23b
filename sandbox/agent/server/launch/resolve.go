package launch

import (
	"bytes"
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// maxDepth bounds how many interpreters are followed from one program: a script whose
// interpreter is a script … The kernel itself gives up after a few levels.
const maxDepth = 4

// Grants returns the files a command restricted to programs may execute: every match of
// each bare name on path (a PATH list), symlinks resolved, plus what executing it takes:
// its ELF interpreter (PT_INTERP), or its #! interpreter, and for "#!/usr/bin/env X" the
// program X looked up on path; each of those again, up to maxDepth levels. Files that
// resolve beneath exclude (the workspace) are left out, as the agent's lookPath does;
// names with a slash and names found nowhere grant nothing.
func Grants(programs []string, path, exclude string) []string {
	files, _ := resolve(programs, path, exclude)
	return files
}

// resolve is Grants, and also returns the paths the grants were found through before
// their symlinks were resolved (each match on path, each interpreter as named): what
// must stay the same files for the grants to stay right (cache.go).
func resolve(programs []string, path, exclude string) (files, through []string) {
	r := &resolver{path: path, exclude: exclude, seen: map[string]bool{}}
	for _, name := range programs {
		for _, p := range r.lookAll(name) {
			r.add(p, 0)
		}
	}
	return r.files, r.through
}

type resolver struct {
	path    string
	exclude string
	seen    map[string]bool
	files   []string
	through []string
}

// lookAll returns every executable regular file called name in the path's directories.
func (r *resolver) lookAll(name string) []string {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return nil
	}
	var out []string
	for _, dir := range filepath.SplitList(r.path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			out = append(out, p)
		}
	}
	return out
}

// add grants file, symlinks resolved, and what the kernel needs to execute it.
func (r *resolver) add(file string, depth int) {
	r.through = append(r.through, file)
	real, err := filepath.EvalSymlinks(file)
	if err != nil || r.seen[real] {
		return
	}
	if r.exclude != "" && (real == r.exclude || strings.HasPrefix(real, strings.TrimSuffix(r.exclude, "/")+"/")) {
		return
	}
	r.seen[real] = true
	r.files = append(r.files, real)
	if depth >= maxDepth {
		return
	}
	for _, next := range r.needs(real) {
		r.add(next, depth+1)
	}
}

// needs returns the files executing file opens for execution: an ELF's interpreter, or
// a script's interpreter (and, for env, the program env runs).
func (r *resolver) needs(file string) []string {
	f, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer f.Close()
	head := make([]byte, 256) // the kernel reads at most this much of a #! line
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte("#!")):
		interp, arg := shebang(head)
		if interp == "" {
			return nil
		}
		out := []string{interp}
		if filepath.Base(interp) == "env" {
			if prog := envProgram(arg); strings.Contains(prog, "/") {
				out = append(out, prog)
			} else if prog != "" {
				out = append(out, r.lookAll(prog)...)
			}
		}
		return out
	case bytes.HasPrefix(head, []byte(elf.ELFMAG)):
		if interp := elfInterp(f); interp != "" {
			return []string{interp}
		}
	}
	return nil
}

// elfInterp returns the PT_INTERP path of an ELF file, "" for a static one.
func elfInterp(f io.ReaderAt) string {
	ef, err := elf.NewFile(f)
	if err != nil {
		return ""
	}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_INTERP || p.Filesz > 4096 {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return ""
		}
		return string(bytes.TrimRight(b, "\x00"))
	}
	return ""
}

// shebang parses a "#!" line as Linux does: the interpreter is the first word, and the
// rest of the line, trimmed, is one optional argument.
func shebang(head []byte) (interp, arg string) {
	line, ok := bytes.CutPrefix(head, []byte("#!"))
	if !ok {
		return "", ""
	}
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	s := strings.Trim(string(line), " \t")
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.Trim(s[i:], " \t")
}

// envProgram returns the program "#!/usr/bin/env ARG" runs: the first word of ARG
// (split, as env -S does) that is neither an option nor a NAME=value assignment.
func envProgram(arg string) string {
	fields := strings.Fields(arg)
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		switch {
		case f == "-S" || f == "--split-string":
			continue
		case f == "-u" || f == "--unset" || f == "-C" || f == "--chdir":
			i++ // the option's value
		case strings.HasPrefix(f, "-"):
			continue
		case strings.Contains(f, "="):
			continue
		default:
			return f
		}
	}
	return ""
}
