package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cwsdev/cws/api"
	"github.com/spf13/cobra"
)

func sessionsCmd(getenv func(string) string) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:     "sessions",
		Aliases: []string{"session", "s"},
		Short:   "Create, list, inspect, renew, suspend, resume, fork and delete sessions",
		Long: `A session is one sandboxed workspace: a container with a volume, owned by the token's
tenant and subject. It is ready (its sandbox runs), suspended (only its volume is kept)
or archived (only the snapshot store keeps its files); any call wakes it. It is removed
when idle past its TTL, or at its hard expiry.

The token comes from --token / CWS_TOKEN; for an HS256 tenant the client can mint one
itself from --tenants FILE --tenant ID --sub NAME.

Examples:
  export CWS_TOKEN=…            # printed by cws serve --dev
  ID=$(cws sessions create --ttl 1h --label job=42)
  cws sessions list
  cws sessions get "$ID" -o json
  cws sessions renew "$ID"
  cws sessions suspend "$ID"; cws sessions resume "$ID"
  cws sessions fork "$ID" --count 4
  cws sessions delete "$ID"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cf.register(cmd.PersistentFlags(), getenv)
	cmd.AddCommand(sessionsCreateCmd(&cf), sessionsListCmd(&cf), sessionsGetCmd(&cf), sessionsDeleteCmd(&cf), sessionsRenewCmd(&cf),
		sessionsSuspendCmd(&cf), sessionsResumeCmd(&cf), sessionsForkCmd(&cf))
	return cmd
}

func sessionsCreateCmd(cf *clientFlags) *cobra.Command {
	var req api.CreateSessionRequest
	var ttl time.Duration
	var env, labels, secretFlags []string
	var idemKey string
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a session and print its id",
		Long: `Create a session, wait until its workspace answers, and print its id (with -o json,
the whole session).

Unset options take the tenant's defaults; its policy caps the TTL and decides which
images and environment variables are allowed. With --idempotency-key a retried create
returns the first one's session instead of making another.

Examples:
  cws sessions create
  cws sessions create --image cws-workspace:0.1.0 --ttl 2h --env LANG=C.UTF-8 --label ci-job=42
  cws sessions create --idempotency-key "build-$CI_JOB_ID" -o json
  cws sessions create --secret GITHUB_TOKEN=gh-token   # see cws secrets
  cws sessions create --snapshot snap-abc…      # its files, image, env and labels`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cf.checkOutput("table", "json"); err != nil {
				return err
			}
			var err error
			if req.Env, err = keyValues("--env", env); err != nil {
				return err
			}
			if req.Labels, err = keyValues("--label", labels); err != nil {
				return err
			}
			if req.Secrets, err = keyValues("--secret", secretFlags); err != nil {
				return err
			}
			if ttl < 0 {
				return fmt.Errorf("--ttl %s: want a positive duration such as 30m", ttl)
			}
			if ttl > 0 {
				req.TTL = ttl.String()
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			hdr := http.Header{}
			if idemKey != "" {
				hdr.Set("Idempotency-Key", idemKey)
			}
			start := time.Now()
			fmt.Fprint(cmd.ErrOrStderr(), "creating session… ")
			var v api.SessionView
			if err := c.call(cmd.Context(), http.MethodPost, "/v1/sessions", req, &v, hdr); err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "failed")
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "done in %s\n", time.Since(start).Round(100*time.Millisecond))
			if cf.output == "json" {
				return printJSON(cmd.OutOrStdout(), v)
			}
			fmt.Fprintln(cmd.OutOrStdout(), v.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Image, "image", "", "workspace image (default: the tenant's or the server's)")
	f.DurationVar(&ttl, "ttl", 0, "idle TTL, e.g. 30m (default: the tenant's; capped by its policy)")
	f.StringArrayVar(&env, "env", nil, "environment variable K=V for commands in the workspace (repeatable)")
	f.StringArrayVar(&labels, "label", nil, "label K=V to find the session by later (repeatable)")
	f.StringArrayVar(&secretFlags, "secret", nil, "ENV=NAME: the tenant's secret NAME, as a placeholder in ENV that cws's egress proxy replaces for the secret's hosts (repeatable)")
	f.StringVar(&idemKey, "idempotency-key", "", "make retries safe: the same key returns the same session for 24 h")
	f.StringVar(&req.Snapshot, "snapshot", "", "start from this snapshot of the tenant's (its files, and its image, env and labels unless given)")
	return cmd
}

// keyValues parses K=V flags into a map.
func keyValues(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: want KEY=VALUE", flag, kv)
		}
		m[k] = v
	}
	return m, nil
}

func sessionsListCmd(cf *clientFlags) *cobra.Command {
	var quiet bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the tenant's sessions",
		Long: `List the sessions of the token's tenant, oldest first.

Examples:
  cws sessions list
  cws sessions list -q | xargs cws sessions delete     # delete them all
  cws sessions list -o json | jq '.sessions[] | select(.labels.job == "42") | .id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cf.checkOutput("table", "json"); err != nil {
				return err
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			var list api.SessionList
			if err := c.call(cmd.Context(), http.MethodGet, "/v1/sessions", nil, &list, nil); err != nil {
				return err
			}
			slices.SortStableFunc(list.Sessions, func(a, b api.SessionView) int { return a.CreatedAt.Compare(b.CreatedAt) })
			out := cmd.OutOrStdout()
			switch {
			case quiet:
				for _, s := range list.Sessions {
					fmt.Fprintln(out, s.ID)
				}
				return nil
			case cf.output == "json":
				return printJSON(out, list)
			}
			return printSessions(out, list.Sessions, time.Now())
		},
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the ids")
	return cmd
}

// printSessions writes the sessions as a table.
func printSessions(w io.Writer, ss []api.SessionView, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tIMAGE\tSTATE\tCREATED\tIDLE UNTIL\tSUB")
	for _, s := range ss {
		state := s.State
		if !s.SuspendedAt.IsZero() {
			state += " " + ago(s.SuspendedAt, now)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Image, state, ago(s.CreatedAt, now), until(s.IdleUntil, now), s.Subject)
	}
	return tw.Flush()
}

func sessionsGetCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "get ID",
		Aliases: []string{"inspect"},
		Short:   "Show one session",
		Long: `Show one session: its image, state, times, labels and MCP URL.

Examples:
  cws sessions get s-abc…
  cws sessions get s-abc… -o json | jq -r .mcpUrl`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cf.checkOutput("table", "json"); err != nil {
				return err
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			var v api.SessionView
			if err := c.call(cmd.Context(), http.MethodGet, sessionPath(args[0]), nil, &v, nil); err != nil {
				return err
			}
			if cf.output == "json" {
				return printJSON(cmd.OutOrStdout(), v)
			}
			return describeSession(cmd.OutOrStdout(), v, time.Now())
		},
	}
}

// describeSession writes one session as aligned "Key: value" lines.
func describeSession(w io.Writer, v api.SessionView, now time.Time) error {
	tw := newTable(w)
	when := func(t time.Time, rel string) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%s (%s)", t.Local().Format(time.RFC3339), rel)
	}
	fmt.Fprintf(tw, "ID:\t%s\n", v.ID)
	fmt.Fprintf(tw, "Subject:\t%s\n", v.Subject)
	fmt.Fprintf(tw, "Image:\t%s\n", v.Image)
	fmt.Fprintf(tw, "State:\t%s\n", v.State)
	if !v.SuspendedAt.IsZero() {
		fmt.Fprintf(tw, "Asleep since:\t%s\n", when(v.SuspendedAt, ago(v.SuspendedAt, now)+" ago"))
	}
	if v.WakeError != "" {
		fmt.Fprintf(tw, "Last wake failed:\t%s: %s\n", when(v.WakeErrorAt, ago(v.WakeErrorAt, now)+" ago"), v.WakeError)
		fmt.Fprintf(tw, "\t(the session stays archived, its archive untouched; the next call tries again)\n")
	}
	for i, n := range v.Notes {
		name := ""
		if i == 0 {
			name = "Notes:"
		}
		fmt.Fprintf(tw, "%s\t%s\n", name, n)
	}
	fmt.Fprintf(tw, "Created:\t%s\n", when(v.CreatedAt, ago(v.CreatedAt, now)+" ago"))
	fmt.Fprintf(tw, "Last used:\t%s\n", when(v.LastUsed, ago(v.LastUsed, now)+" ago"))
	fmt.Fprintf(tw, "Idle until:\t%s\n", when(v.IdleUntil, until(v.IdleUntil, now)))
	fmt.Fprintf(tw, "Expires:\t%s\n", when(v.ExpiresAt, until(v.ExpiresAt, now)))
	for i, k := range slices.Sorted(maps.Keys(v.Labels)) {
		name := ""
		if i == 0 {
			name = "Labels:"
		}
		fmt.Fprintf(tw, "%s\t%s=%s\n", name, k, v.Labels[k])
	}
	fmt.Fprintf(tw, "MCP URL:\t%s\n", v.MCPURL)
	return tw.Flush()
}

func sessionsDeleteCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "delete ID...",
		Aliases: []string{"rm"},
		Short:   "Delete sessions, their containers and their volumes",
		Long: `Delete sessions, with their containers and workspace volumes. Each deleted id is
printed; the command goes on past a failure and exits 1 if any delete failed.

Examples:
  cws sessions delete s-abc… s-def…
  cws sessions list -q | xargs cws sessions delete`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			var errs []error
			for _, id := range args {
				if err := c.call(cmd.Context(), http.MethodDelete, sessionPath(id), nil, nil, nil); err != nil {
					if len(args) == 1 {
						return err
					}
					errs = append(errs, fmt.Errorf("%s: %w", id, err))
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), id)
			}
			return errors.Join(errs...)
		},
	}
}

func sessionsRenewCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "renew ID",
		Short: "Push a session's idle deadline out by its TTL",
		Long: `Renew a session's idle TTL, as any call to it does, so a session that waits for a
person is not reaped. The hard expiry does not move.

Examples:
  cws sessions renew s-abc…
  while sleep 600; do cws sessions renew "$ID"; done`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cf.checkOutput("table", "json"); err != nil {
				return err
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			var v api.SessionView
			if err := c.call(cmd.Context(), http.MethodPost, sessionPath(args[0], "renew"), nil, &v, nil); err != nil {
				return err
			}
			if cf.output == "json" {
				return printJSON(cmd.OutOrStdout(), v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s idle until %s (%s)\n", v.ID, v.IdleUntil.Local().Format(time.RFC3339), until(v.IdleUntil, time.Now()))
			return nil
		},
	}
}
