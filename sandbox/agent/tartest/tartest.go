// Package tartest holds the archives that the tests of the agent's tar.in share: a
// fixture workspace, the hostile uploads that must be refused without changing a byte of
// it, and a digest of a workspace taken from its tar.out stream. The in-process agent
// tests and the tests against a real container run the same cases.
package tartest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
)

// Guard is the policy the cases run under: secrets/ and .env are denied, the policy
// file is protected.
func Guard() *guard.Guard {
	return &guard.Guard{Deny: []string{"secrets", "secrets/**", ".env"}, Protect: []string{".cws-policy.json"}}
}

// Entry is one archive entry. Type defaults to a regular file holding Body.
type Entry struct {
	Name string
	Type byte
	Body string
	Link string
	Mode int64
}

// File, Dir, Symlink and Hardlink build the common entries.
func File(name, body string) Entry { return Entry{Name: name, Body: body} }
func Dir(name string) Entry        { return Entry{Name: name, Type: tar.TypeDir} }
func Symlink(name, to string) Entry {
	return Entry{Name: name, Type: tar.TypeSymlink, Link: to}
}
func Hardlink(name, to string) Entry { return Entry{Name: name, Type: tar.TypeLink, Link: to} }

// Build writes the entries as a tar archive.
func Build(ents ...Entry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		if e.Type == tar.TypeXGlobalHeader { // as git archive writes: a comment, no file
			if err := tw.WriteHeader(&tar.Header{Typeflag: e.Type, PAXRecords: map[string]string{"comment": e.Body}}); err != nil {
				panic(fmt.Sprintf("tartest: global header: %v", err))
			}
			continue
		}
		h := &tar.Header{Name: e.Name, Typeflag: e.Type, Linkname: e.Link, Mode: e.Mode, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			panic(fmt.Sprintf("tartest: header %s: %v", e.Name, err))
		}
		if e.Body != "" {
			if _, err := tw.Write([]byte(e.Body)); err != nil {
				panic(fmt.Sprintf("tartest: body %s: %v", e.Name, err))
			}
		}
	}
	if err := tw.Close(); err != nil {
		panic(fmt.Sprintf("tartest: close: %v", err))
	}
	return buf.Bytes()
}

// Fixture is the workspace the cases start from, as an archive to upload without a
// guard: plain files, a directory, denied files and a symlink.
func Fixture() []byte {
	return Build(
		File("README.md", "# fixture\n"),
		Dir("src"),
		File("src/main.go", "package main\n"),
		File("src/util.go", "package main\n\nfunc util() {}\n"),
		File(".env", "TOKEN=hunter2\n"),
		Dir("secrets"),
		File("secrets/key", "-----BEGIN KEY-----\n"),
		Symlink("docs", "src"),
	)
}

// Case is one upload that must be refused with Code, naming Path, and leave the fixture
// workspace exactly as it was. Every case starts with entries the guard allows (a new
// file and a replacement of src/main.go), so an extractor that writes as it reads fails.
type Case struct {
	Name     string
	Body     func() io.Reader
	MaxBytes int64
	Code     string
	Path     string
}

// allowed are the harmless entries every refused archive starts with.
var allowed = []Entry{File("new.txt", "new\n"), File("src/main.go", "package main // replaced\n")}

func archive(ents ...Entry) func() io.Reader {
	return func() io.Reader { return bytes.NewReader(Build(append(slices.Clone(allowed), ents...)...)) }
}

// Refusals returns the hostile uploads.
func Refusals() []Case {
	return []Case{
		{Name: "dot-dot name", Body: archive(File("../escape.txt", "x")), Code: agent.CodeTraversal, Path: "../escape.txt"},
		{Name: "dot-dot inside a name", Body: archive(File("src/../../escape.txt", "x")), Code: agent.CodeTraversal, Path: "src/../../escape.txt"},
		{Name: "absolute name", Body: archive(File("/etc/cws-escape", "x")), Code: agent.CodeTraversal, Path: "/etc/cws-escape"},
		{Name: "symlink to /etc then a file through it", Body: archive(Symlink("link", "/etc"), File("link/cws-escape", "x")), Code: agent.CodeTraversal, Path: "link"},
		{Name: "symlink to a denied dir then a file through it", Body: archive(Symlink("link", "secrets"), File("link/x", "x")), Code: agent.CodeDenied, Path: "link"},
		{Name: "file through an allowed symlink of the archive", Body: archive(Symlink("link", "src"), File("link/x", "x")), Code: agent.CodeTraversal, Path: "link/x"},
		{Name: "symlink out of the workspace", Body: archive(Symlink("src/out", "../../etc/passwd")), Code: agent.CodeTraversal, Path: "src/out"},
		{Name: "denied file", Body: archive(File("secrets/new", "x")), Code: agent.CodeDenied, Path: "secrets/new"},
		{Name: "denied file replaced", Body: archive(File(".env", "TOKEN=mine\n")), Code: agent.CodeDenied, Path: ".env"},
		{Name: "protected policy file", Body: archive(File(".cws-policy.json", "{}")), Code: agent.CodeDenied, Path: ".cws-policy.json"},
		{Name: "fifo", Body: archive(Entry{Name: "fifo", Type: tar.TypeFifo}), Code: agent.CodeInvalid, Path: "fifo"},
		{Name: "char device", Body: archive(Entry{Name: "null", Type: tar.TypeChar}), Code: agent.CodeInvalid, Path: "null"},
		{Name: "duplicate entry", Body: archive(File("new.txt", "again\n")), Code: agent.CodeInvalid, Path: "new.txt"},
		{Name: "file replacing a directory", Body: archive(File("src", "x")), Code: agent.CodeInvalid, Path: "src"},
		{Name: "hard link to a denied file", Body: archive(Hardlink("copy", ".env")), Code: agent.CodeDenied, Path: "copy"},
		{Name: "hard link out of the workspace", Body: archive(Hardlink("copy", "../../etc/passwd")), Code: agent.CodeTraversal, Path: "copy"},
		{Name: "hard link to an absolute path", Body: archive(Hardlink("copy", "/etc/passwd")), Code: agent.CodeTraversal, Path: "copy"},
		{Name: "hard link to a missing file", Body: archive(Hardlink("copy", "nowhere.txt")), Code: agent.CodeInvalid, Path: "copy"},
		{Name: "hard link to a workspace file not in the archive", Body: archive(Hardlink("copy", "README.md")), Code: agent.CodeInvalid, Path: "copy"},
		{Name: "hard link to a directory", Body: archive(Hardlink("copy", "src")), Code: agent.CodeInvalid, Path: "copy"},
		{Name: "reserved staging name", Body: archive(File(".cws-staging-0/x", "x")), Code: agent.CodeInvalid, Path: ".cws-staging-0/x"},
		{Name: "over the size limit", MaxBytes: 1 << 10, Body: archive(File("big", strings.Repeat("x", 2<<10))), Code: agent.CodeTooLarge, Path: "big"},
		{Name: "hard link copies count against the size limit", MaxBytes: 1 << 10,
			Body: archive(File("half", strings.Repeat("x", 600)), Hardlink("copy", "half")), Code: agent.CodeTooLarge, Path: "copy"},
		{Name: "bomb: an endless entry", MaxBytes: 1 << 20, Body: bomb, Code: agent.CodeTooLarge, Path: "bomb"},
		{Name: "truncated archive", Body: truncated, Code: agent.CodeInvalid},
	}
}

// bomb is a stream that never ends: a header declaring a TiB, then zeros forever (what
// a gzip bomb decompresses to). It must be refused without reading it to the end.
func bomb() io.Reader {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range allowed {
		_ = tw.WriteHeader(&tar.Header{Name: e.Name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.Body))})
		_, _ = tw.Write([]byte(e.Body))
	}
	_ = tw.WriteHeader(&tar.Header{Name: "bomb", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 40})
	_ = tw.Flush()
	return io.MultiReader(&buf, zeros{})
}

// truncated ends in the middle of an entry's body.
func truncated() io.Reader {
	b := Build(append(slices.Clone(allowed), File("cut", strings.Repeat("y", 4096)))...)
	return bytes.NewReader(b[:len(b)-2048-1024])
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// Hash digests a tar.out stream: every entry's name, type, permissions, link target and
// contents.
func Hash(r io.Reader) (string, error) {
	h := sha256.New()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hex.EncodeToString(h.Sum(nil)), nil
		}
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%q %c %o %q\n", hdr.Name, hdr.Typeflag, hdr.Mode&0o777, hdr.Linkname)
		c := sha256.New()
		if _, err := io.Copy(c, tr); err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%x\n", c.Sum(nil))
	}
}

// StoreOrder rewrites an archive in the order the snapshot store reads one back:
// directories and symlinks first in their order, then the regular files in an order
// drawn from seed (the store groups them by the pack that holds them, not by path),
// hard links last, global headers at the end.
func StoreOrder(archive []byte, seed uint64) []byte {
	type entry struct {
		hdr  *tar.Header
		body []byte
	}
	var first, files, links, global []entry
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			panic(fmt.Sprintf("tartest: read archive: %v", err))
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			panic(fmt.Sprintf("tartest: read %s: %v", hdr.Name, err))
		}
		e := entry{hdr, body}
		switch hdr.Typeflag {
		case tar.TypeReg:
			files = append(files, e)
		case tar.TypeLink:
			links = append(links, e)
		case tar.TypeXGlobalHeader:
			global = append(global, e)
		default:
			first = append(first, e)
		}
	}
	r := rand.New(rand.NewPCG(seed, seed+1))
	r.Shuffle(len(files), func(i, j int) { files[i], files[j] = files[j], files[i] })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range slices.Concat(first, files, links, global) {
		if err := tw.WriteHeader(e.hdr); err != nil {
			panic(fmt.Sprintf("tartest: header %s: %v", e.hdr.Name, err))
		}
		if _, err := tw.Write(e.body); err != nil {
			panic(fmt.Sprintf("tartest: body %s: %v", e.hdr.Name, err))
		}
	}
	if err := tw.Close(); err != nil {
		panic(fmt.Sprintf("tartest: close: %v", err))
	}
	return buf.Bytes()
}
