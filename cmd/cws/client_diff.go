package main

import (
	"io"
	"net/http"

	"github.com/spf13/cobra"
)

func diffCmd(getenv func(string) string) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "diff SESSION",
		Short: "Print a session's changes since its last commit, as a git patch",
		Long: `Print the workspace's changes since its last commit as a git patch, new files
included; the repository's index is not touched. The workspace must be a git
repository.

Examples:
  cws diff "$ID"
  cws diff "$ID" > changes.patch && git apply changes.patch
  cws diff "$ID" | less -R`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			resp, err := c.do(cmd.Context(), http.MethodGet, sessionPath(args[0], "diff"), nil, nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, err = io.Copy(cmd.OutOrStdout(), resp.Body)
			return err
		},
	}
	cf.register(cmd.Flags(), getenv)
	_ = cmd.Flags().MarkHidden("output")
	return cmd
}
