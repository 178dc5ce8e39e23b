package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"

	"github.com/cwsdev/cws/workspace"
	"github.com/spf13/cobra"
)

func uploadCmd(getenv func(string) string) *cobra.Command {
	var cf clientFlags
	var showProgress bool
	cmd := &cobra.Command{
		Use:   "upload SESSION DIR|FILE.tar[.gz]",
		Short: "Copy a directory or a tar archive into a session's workspace",
		Long: `Copy files into the root of a session's workspace (/workspace). A directory is
tarred on the fly and streamed, never held in memory; a .tar or .tar.gz file is sent
as it is. Existing files are overwritten. It needs a token with the archive scope, and
moves the whole tree (.git included): deniedPaths guard the agent's tools, not the
archive.

Progress goes to stderr when it is a terminal, or with --progress.

Examples:
  cws upload "$ID" .
  cws upload "$ID" ./src
  git archive --format=tar.gz HEAD > src.tgz && cws upload "$ID" src.tgz`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cf.checkOutput("table", "json"); err != nil {
				return err
			}
			session, src := args[0], args[1]
			st, err := os.Stat(src)
			if err != nil {
				return err
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			var body io.ReadCloser
			if st.IsDir() {
				pr, pw := io.Pipe()
				go func() { pw.CloseWithError(writeTar(cmd.Context(), pw, src, cmd.ErrOrStderr())) }()
				body = pr
			} else {
				f, err := os.Open(src)
				if err != nil {
					return err
				}
				body = f
			}
			defer body.Close() // also stops the tar writer if the request ends early
			prog := newProgress(cmd.ErrOrStderr(), "sent", showProgress || isTerminal(cmd.ErrOrStderr()))
			hdr := http.Header{"Content-Type": {"application/x-tar"}}
			resp, err := c.do(cmd.Context(), http.MethodPut, sessionPath(session, "archive"), prog.reader(body), hdr)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			prog.done()
			var res workspace.UploadResult
			if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
				return fmt.Errorf("upload: decode response: %w", err)
			}
			if cf.output == "json" {
				return printJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "uploaded %d files and %d directories (%s) to %s\n", res.Files, res.Dirs, humanBytes(res.Bytes), session)
			return nil
		},
	}
	cf.register(cmd.Flags(), getenv)
	cmd.Flags().BoolVar(&showProgress, "progress", false, "show bytes sent on stderr even when it is not a terminal")
	return cmd
}

// writeTar writes dir's tree to w as a tar archive, names relative to dir. Files,
// directories and symlinks go in; anything else (sockets, devices) is skipped with a
// warning on warn.
func writeTar(ctx context.Context, w io.Writer, dir string, warn io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		switch {
		case info.Mode().IsRegular(), info.IsDir():
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			fmt.Fprintf(warn, "skipping %s: not a file, directory or symlink\n", p)
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.Copy(tw, f); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("tar %s: %w", dir, err)
	}
	return tw.Close()
}
