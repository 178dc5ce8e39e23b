package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strings"

	"github.com/spf13/cobra"
)

func downloadCmd(getenv func(string) string) *cobra.Command {
	var cf clientFlags
	var outFile, dir string
	var showProgress bool
	cmd := &cobra.Command{
		Use:   "download SESSION [-O FILE.tar | -C DIR]",
		Short: "Download a session's workspace as a tar archive, or into a directory",
		Long: `Download the whole workspace, streamed: to a tar file (-O), extracted into a directory
(-C), or as a tar archive on stdout when that is not a terminal. It needs a token with
the archive scope, and has every path (deniedPaths guard the agent's tools, not the
archive).

Extracting with -C never writes outside DIR: an entry whose name leaves it is refused,
and a symlink pointing outside it is skipped with a warning. Existing files are
overwritten.

Examples:
  cws download "$ID" -O workspace.tar
  cws download "$ID" -C ./out
  cws download "$ID" | tar -tv`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			switch {
			case outFile != "" && dir != "":
				return errors.New("-O and -C exclude each other: write a file or extract into a directory")
			case outFile == "" && dir == "" && isTerminal(stdout):
				return &hinted{errors.New("refusing to write a tar archive to a terminal"), "pass -O FILE.tar, -C DIR, or pipe it (cws download ID | tar -t)"}
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			resp, err := c.do(cmd.Context(), http.MethodGet, sessionPath(args[0], "archive"), nil, nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			prog := newProgress(stderr, "received", showProgress || isTerminal(stderr))
			body := prog.reader(resp.Body)

			if dir != "" {
				n, err := extractTar(body, dir, stderr)
				if err != nil {
					return err
				}
				prog.done()
				fmt.Fprintf(stdout, "extracted %d entries (%s) into %s\n", n, humanBytes(prog.total()), dir)
				return nil
			}
			if outFile == "" || outFile == "-" {
				if err := copyTar(stdout, body); err != nil {
					return err
				}
				prog.done()
				return nil
			}
			f, err := os.Create(outFile)
			if err != nil {
				return err
			}
			if err := copyTar(f, body); err != nil {
				f.Close()
				os.Remove(outFile)
				return err
			}
			prog.done()
			return f.Close()
		},
	}
	cf.register(cmd.Flags(), getenv)
	_ = cmd.Flags().MarkHidden("output")
	f := cmd.Flags()
	f.StringVarP(&outFile, "output-file", "O", "", "write the tar archive to FILE (- for stdout)")
	f.StringVarP(&dir, "directory", "C", "", "extract into DIR (created if missing)")
	f.BoolVar(&showProgress, "progress", false, "show bytes received on stderr even when it is not a terminal")
	return cmd
}

// errTruncated is a download the server broke off: tar's end marker never came.
var errTruncated = &hinted{errors.New("the archive is truncated: the server broke off the download"), "retry; the server's log says why"}

// copyTar copies a tar stream from r to w, reading it as tar on the way so that a
// stream that breaks off is an error rather than a short file.
func copyTar(w io.Writer, r io.Reader) error {
	er := &endReader{r: io.TeeReader(r, w)}
	tr := tar.NewReader(er)
	for {
		_, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return tarError(err)
		}
	}
	if !er.sawEnd() {
		return errTruncated
	}
	_, err := io.Copy(w, r) // the padding after the end marker
	return err
}

// endReader tells tar's end marker (two zero blocks) from a stream that merely stops
// between entries, which archive/tar also reports as io.EOF. tar.Reader reads headers
// and skips contents in exact blocks, so the marker is the last 1024 bytes it read.
type endReader struct {
	r     io.Reader
	zeros int // trailing zero bytes read so far
}

func (e *endReader) Read(b []byte) (int, error) {
	n, err := e.r.Read(b)
	for _, c := range b[:n] {
		if c == 0 {
			e.zeros++
		} else {
			e.zeros = 0
		}
	}
	return n, err
}

func (e *endReader) sawEnd() bool { return e.zeros >= 2*512 }

func tarError(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errTruncated
	}
	return fmt.Errorf("read archive: %w", err)
}

// extractTar extracts a tar stream into dir through an os.Root, so nothing can be
// written outside it; it returns the number of entries written.
func extractTar(r io.Reader, dir string, warn io.Writer) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	er := &endReader{r: r}
	tr := tar.NewReader(er)
	n := 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			if !er.sawEnd() {
				return n, errTruncated
			}
			return n, nil
		}
		if err != nil {
			return n, tarError(err)
		}
		name, ok := localName(hdr.Name)
		if !ok {
			return n, fmt.Errorf("refusing archive entry %q: it would land outside %s", hdr.Name, dir)
		}
		if name == "." {
			continue
		}
		perm := fs.FileMode(hdr.Mode) & fs.ModePerm
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = root.MkdirAll(name, perm|0o700)
		case tar.TypeReg:
			err = writeEntry(root, name, perm, tr)
		case tar.TypeSymlink:
			if !linkInside(name, hdr.Linkname) {
				fmt.Fprintf(warn, "skipping symlink %s -> %s: it points outside %s\n", name, hdr.Linkname, dir)
				continue
			}
			if err = mkParent(root, name); err == nil {
				_ = root.Remove(name)
				err = root.Symlink(hdr.Linkname, name)
			}
		default:
			fmt.Fprintf(warn, "skipping %s: unsupported entry type %q\n", name, string(hdr.Typeflag))
			continue
		}
		if err != nil {
			return n, fmt.Errorf("extract %s: %w", name, err)
		}
		n++
	}
}

func writeEntry(root *os.Root, name string, perm fs.FileMode, r io.Reader) error {
	if err := mkParent(root, name); err != nil {
		return err
	}
	_ = root.Remove(name) // replace a symlink rather than write through it
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm|0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return tarError(err)
	}
	return f.Close()
}

func mkParent(root *os.Root, name string) error {
	if d := path.Dir(name); d != "." {
		return root.MkdirAll(d, 0o755)
	}
	return nil
}

// localName cleans an entry name and reports whether it stays inside the directory.
func localName(name string) (string, bool) {
	name = strings.TrimPrefix(name, "./")
	if name == "" || path.IsAbs(name) || strings.Contains(name, `\`) {
		return "", false
	}
	clean := path.Clean(name)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", false
	}
	return clean, true
}

// linkInside reports whether a symlink at name pointing to target stays inside the directory.
func linkInside(name, target string) bool {
	if target == "" || path.IsAbs(target) {
		return false
	}
	_, ok := localName(path.Join(path.Dir(name), target))
	return ok
}
