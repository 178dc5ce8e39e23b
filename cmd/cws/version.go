package main

import (
	"fmt"
	"runtime"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/version"
	"github.com/spf13/cobra"
)

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "cws %s (commit %s, agent protocol %d, %s)\n", version.Version, version.Commit, agent.ProtocolVersion, runtime.Version())
			return nil
		},
	}
}
