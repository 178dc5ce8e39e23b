package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/cwsdev/cws/api"
)

func sessionsSuspendCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "suspend ID",
		Short: "Suspend a session: its sandbox stops, its files stay",
		Long: `Suspend a session now. Its container (or pod) stops and costs nothing but its disk;
the next call to it, or 'cws sessions resume', wakes it with every file as it was.
Running processes end; listProcesses then shows them as ended by the suspend.
Sessions are also suspended by themselves after --suspend-after (or the tenant's
suspendAfter) without a call. Suspending a suspended session does nothing.

Examples:
  cws sessions suspend s-abc…
  cws sessions list            # STATE says suspended`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return sessionAction(cmd, cf, args[0], "suspend", "suspending")
		},
	}
}

func sessionsResumeCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "resume ID",
		Aliases: []string{"wake"},
		Short:   "Wake a suspended or archived session now",
		Long: `Wake a suspended or archived session before its next call, so that call does not
wait for it. A ready session is left as it is.

Examples:
  cws sessions resume s-abc…`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return sessionAction(cmd, cf, args[0], "resume", "waking")
		},
	}
}

// sessionAction POSTs /v1/sessions/ID/what and prints the session's new state.
func sessionAction(cmd *cobra.Command, cf *clientFlags, id, what, doing string) error {
	if err := cf.checkOutput("table", "json"); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	start := time.Now()
	fmt.Fprintf(cmd.ErrOrStderr(), "%s %s… ", doing, id)
	var v api.SessionView
	if err := c.call(cmd.Context(), http.MethodPost, sessionPath(id, what), nil, &v, nil); err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "failed")
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "done in %s\n", time.Since(start).Round(100*time.Millisecond))
	if cf.output == "json" {
		return printJSON(cmd.OutOrStdout(), v)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", v.ID, v.State)
	return nil
}

func sessionsForkCmd(cf *clientFlags) *cobra.Command {
	var count int
	cmd := &cobra.Command{
		Use:   "fork ID",
		Short: "Make new sessions with a session's files at one instant",
		Long: `Fork a session into --count new ones (1 to 16), each with the source's files as they
were at one instant (.git and denied paths included), its image, env and labels. The
source goes on unchanged, and the forks are independent of it and of each other. The
new ids are printed, one a line; a fork that failed is said on stderr, and the command
exits 1 if any did.

Examples:
  cws sessions fork s-abc… --count 4
  for id in $(cws sessions fork "$ID" --count 3); do cws call "$id" runCommand --arg command=make & done`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cf.checkOutput("table", "json"); err != nil {
				return err
			}
			if count < 1 || count > 16 {
				return fmt.Errorf("--count %d: want 1 to 16", count)
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			start := time.Now()
			fmt.Fprintf(cmd.ErrOrStderr(), "forking %s into %d… ", args[0], count)
			var v api.ForkResponse
			if err := c.call(cmd.Context(), http.MethodPost, sessionPath(args[0], "fork"), map[string]int{"count": count}, &v, nil); err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "failed")
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d made in %s\n", len(v.Sessions), time.Since(start).Round(100*time.Millisecond))
			if cf.output == "json" {
				return printJSON(cmd.OutOrStdout(), v)
			}
			for _, s := range v.Sessions {
				fmt.Fprintln(cmd.OutOrStdout(), s.ID)
			}
			for _, e := range v.Errors {
				fmt.Fprintf(cmd.ErrOrStderr(), "a fork failed: %s (%s)\n", e.Error.Message, e.Error.Code)
			}
			if len(v.Errors) > 0 {
				return exitError{1}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&count, "count", 1, "how many sessions to make (1 to 16)")
	return cmd
}

func snapshotsCmd(getenv func(string) string) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:     "snapshots",
		Aliases: []string{"snapshot", "snap"},
		Short:   "Take, list, inspect and delete snapshots of sessions",
		Long: `A snapshot is the whole workspace of a session (.git and denied paths included), with
its image, env and labels, kept in the snapshot store (cws serve --snapshot-store). New
sessions start from one with 'cws sessions create --snapshot ID'. A snapshot of a barely
changed workspace stores almost nothing new: contents are deduplicated per tenant.

Examples:
  SNAP=$(cws snapshots create "$ID" --name before-refactor)
  cws snapshots list
  cws sessions create --snapshot "$SNAP"
  cws snapshots delete "$SNAP"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cf.register(cmd.PersistentFlags(), getenv)
	cmd.AddCommand(snapshotsCreateCmd(&cf), snapshotsListCmd(&cf), snapshotsGetCmd(&cf), snapshotsDeleteCmd(&cf))
	return cmd
}

func snapshotsCreateCmd(cf *clientFlags) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "create SESSION",
		Short: "Take a snapshot of a session and print its id",
		Long: `Take a snapshot of a session's whole workspace and print its id (with -o json, the
whole snapshot). The tenant's maxSnapshots and maxSnapshotBytes apply.

Examples:
  cws snapshots create s-abc… --name before-refactor`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cf.checkOutput("table", "json"); err != nil {
				return err
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			start := time.Now()
			fmt.Fprintf(cmd.ErrOrStderr(), "snapshotting %s… ", args[0])
			var v api.SnapshotView
			if err := c.call(cmd.Context(), http.MethodPost, sessionPath(args[0], "snapshots"), api.CreateSnapshotRequest{Name: name}, &v, nil); err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "failed")
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d files, %s, in %s\n", v.Files, humanBytes(v.Bytes), time.Since(start).Round(100*time.Millisecond))
			if cf.output == "json" {
				return printJSON(cmd.OutOrStdout(), v)
			}
			fmt.Fprintln(cmd.OutOrStdout(), v.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a name to find it by")
	return cmd
}

func snapshotsListCmd(cf *clientFlags) *cobra.Command {
	var quiet bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the tenant's snapshots",
		Long: `List the snapshots of the token's tenant, oldest first.

Examples:
  cws snapshots list
  cws snapshots list -q | xargs cws snapshots delete`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cf.checkOutput("table", "json"); err != nil {
				return err
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			var list api.SnapshotList
			if err := c.call(cmd.Context(), http.MethodGet, "/v1/snapshots", nil, &list, nil); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch {
			case quiet:
				for _, s := range list.Snapshots {
					fmt.Fprintln(out, s.ID)
				}
				return nil
			case cf.output == "json":
				return printJSON(out, list)
			}
			return printSnapshots(out, list.Snapshots, time.Now())
		},
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the ids")
	return cmd
}

func printSnapshots(w io.Writer, ss []api.SnapshotView, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tNAME\tSESSION\tFILES\tSIZE\tCREATED")
	for _, s := range ss {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", s.ID, s.Name, s.Session, s.Files, humanBytes(s.Bytes), ago(s.CreatedAt, now))
	}
	return tw.Flush()
}

func snapshotsGetCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "get ID",
		Aliases: []string{"inspect"},
		Short:   "Show one snapshot",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cf.checkOutput("table", "json"); err != nil {
				return err
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			var v api.SnapshotView
			if err := c.call(cmd.Context(), http.MethodGet, "/v1/snapshots/"+url.PathEscape(args[0]), nil, &v, nil); err != nil {
				return err
			}
			if cf.output == "json" {
				return printJSON(cmd.OutOrStdout(), v)
			}
			return printSnapshots(cmd.OutOrStdout(), []api.SnapshotView{v}, time.Now())
		},
	}
}

func snapshotsDeleteCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "delete ID...",
		Aliases: []string{"rm"},
		Short:   "Delete snapshots",
		Long: `Delete snapshots. Each deleted id is printed; contents no other snapshot shares are
collected later.

Examples:
  cws snapshots delete snap-abc…`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			for _, id := range args {
				if err := c.call(cmd.Context(), http.MethodDelete, "/v1/snapshots/"+url.PathEscape(id), nil, nil, nil); err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), id)
			}
			return nil
		},
	}
}
