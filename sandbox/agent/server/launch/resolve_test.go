package launch

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// writeELF writes a minimal x86-64 ELF executable whose PT_INTERP is interp ("" for a
// static one): enough for debug/elf, never run.
func writeELF(t *testing.T, path, interp string) {
	t.Helper()
	var b bytes.Buffer
	const ehsize, phsize = 64, 56
	hdr := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Ehsize: ehsize, Phentsize: phsize}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS], hdr.Ident[elf.EI_DATA], hdr.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	if interp != "" {
		hdr.Phoff, hdr.Phnum = ehsize, 1
	}
	must(t, binary.Write(&b, binary.LittleEndian, hdr))
	if interp != "" {
		must(t, binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(elf.PT_INTERP), Off: ehsize + phsize,
			Filesz: uint64(len(interp) + 1), Memsz: uint64(len(interp) + 1), Align: 1}))
		b.WriteString(interp + "\x00")
	}
	writeFile(t, path, b.String(), 0o755)
}

func writeFile(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, os.WriteFile(path, []byte(data), mode))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestGrants(t *testing.T) {
	d, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	p := func(rel string) string { return filepath.Join(d, rel) }
	ld := p("lib/ld.so")
	writeFile(t, ld, "not run", 0o755)
	writeELF(t, p("bin/dyn"), p("lib/ld-link.so")) // the interpreter through a symlink
	must(t, os.Symlink(ld, p("lib/ld-link.so")))
	writeELF(t, p("bin/static"), "")
	writeELF(t, p("bin/env"), ld)
	writeELF(t, p("opt/py3.11"), ld)
	must(t, os.Symlink(p("opt/py3.11"), p("bin2-py3")))
	must(t, os.MkdirAll(p("bin2"), 0o755))
	must(t, os.Rename(p("bin2-py3"), p("bin2/py3")))
	writeFile(t, p("bin/envscript"), "#! "+p("bin/env")+" -S py3 -u\nprint()\n", 0o755)
	writeFile(t, p("bin/abs-envscript"), "#!"+p("bin/env")+" "+p("opt/py3.11")+"\n", 0o755)
	writeFile(t, p("bin/script"), "#!"+p("bin/dyn")+"\techo\n", 0o755)
	writeFile(t, p("bin/noexec"), "#!"+p("bin/dyn")+"\n", 0o644)
	writeFile(t, p("bin/self"), "#!"+p("bin/self")+"\n", 0o755)
	writeELF(t, p("ws/evil"), "")
	must(t, os.Symlink(p("ws/evil"), p("bin/evil")))
	// A chain of scripts longer than maxDepth.
	for i := range 7 {
		writeFile(t, p("chain/"+string(rune('a'+i))), "#!"+p("chain/"+string(rune('a'+i+1)))+"\n", 0o755)
	}
	must(t, os.Symlink(p("chain/a"), p("bin/chain")))

	path := p("bin") + ":" + p("bin2") + ":" + p("missing")
	for _, tc := range []struct {
		name     string
		programs []string
		want     []string
	}{
		{"dynamic ELF and its resolved interpreter", []string{"dyn"}, []string{"bin/dyn", "lib/ld.so"}},
		{"static ELF", []string{"static"}, []string{"bin/static"}},
		{"symlink resolved, on the second PATH entry", []string{"py3"}, []string{"opt/py3.11", "lib/ld.so"}},
		{"#!/usr/bin/env -S X: env and X looked up on PATH", []string{"envscript"}, []string{"bin/envscript", "bin/env", "lib/ld.so", "opt/py3.11"}},
		{"#!/usr/bin/env /abs/X", []string{"abs-envscript"}, []string{"bin/abs-envscript", "bin/env", "lib/ld.so", "opt/py3.11"}},
		{"#! interpreter and its ELF interpreter", []string{"script"}, []string{"bin/script", "bin/dyn", "lib/ld.so"}},
		{"not executable", []string{"noexec"}, nil},
		{"a script that names itself", []string{"self"}, []string{"bin/self"}},
		{"chain bounded", []string{"chain"}, []string{"chain/a", "chain/b", "chain/c", "chain/d", "chain/e"}},
		{"resolving into the workspace", []string{"evil"}, nil},
		{"names with a slash and unknown names", []string{"bin/dyn", "/bin/dyn", "nope", "", ".."}, nil},
		{"duplicates once", []string{"dyn", "dyn", "script"}, []string{"bin/dyn", "lib/ld.so", "bin/script"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Grants(tc.programs, path, p("ws"))
			var want []string
			for _, w := range tc.want {
				want = append(want, p(w))
			}
			if !slices.Equal(got, want) {
				t.Errorf("Grants(%q) =\n %q\nwant\n %q", tc.programs, got, want)
			}
		})
	}
}

func TestShebang(t *testing.T) {
	for _, tc := range []struct{ line, interp, arg string }{
		{"#!/bin/sh\necho", "/bin/sh", ""},
		{"#! /usr/bin/env python3\n", "/usr/bin/env", "python3"},
		{"#!/usr/bin/perl -w  \n", "/usr/bin/perl", "-w"},
		{"#!/bin/sh -\n", "/bin/sh", "-"},
		{"#!/usr/bin/env -S python3 -u\n", "/usr/bin/env", "-S python3 -u"},
		{"#!\t/bin/bash\t-e\n", "/bin/bash", "-e"},
		{"#!/bin/sh", "/bin/sh", ""},
		{"#!\n", "", ""},
		{"echo", "", ""},
	} {
		interp, arg := shebang([]byte(tc.line))
		if interp != tc.interp || arg != tc.arg {
			t.Errorf("shebang(%q) = %q, %q; want %q, %q", tc.line, interp, arg, tc.interp, tc.arg)
		}
	}
}

func TestEnvProgram(t *testing.T) {
	for _, tc := range []struct{ arg, want string }{
		{"python3", "python3"},
		{"-S python3 -u", "python3"},
		{"-S PYTHONHASHSEED=0 python3", "python3"},
		{"-u HOME node", "node"},
		{"-i --chdir /tmp ruby", "ruby"},
		{"/opt/bin/x", "/opt/bin/x"},
		{"", ""},
		{"-S", ""},
	} {
		if got := envProgram(tc.arg); got != tc.want {
			t.Errorf("envProgram(%q) = %q, want %q", tc.arg, got, tc.want)
		}
	}
}
