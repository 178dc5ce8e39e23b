package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cwsdev/cws/api"
	"github.com/cwsdev/cws/workspace"
)

func secretsCmd(getenv func(string) string) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:     "secrets",
		Aliases: []string{"secret"},
		Short:   "Write, list and delete the tenant's secrets (scope secrets)",
		Long: `A secret is a credential a workspace never sees: a session that asks for it (cws
sessions create --secret ENV=NAME) gets a placeholder in ENV, and cws's egress proxy puts
the value in for the secret's hosts only. Values are written and never shown again.

The token needs the scope secrets, which no tenant has by default.

Examples:
  cws secrets set gh-token --host github.com --host '*.github.com' --from-file token.txt
  printf %s "$TOKEN" | cws secrets set gh-token --host github.com
  cws secrets list
  cws secrets delete gh-token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cf.register(cmd.PersistentFlags(), getenv)
	cmd.AddCommand(secretsSetCmd(&cf), secretsListCmd(&cf), secretsDeleteCmd(&cf))
	return cmd
}

func secretPath(name string) string { return "/v1/secrets/" + url.PathEscape(name) }

func secretsSetCmd(cf *clientFlags) *cobra.Command {
	var hosts []string
	var from string
	cmd := &cobra.Command{
		Use:   "set NAME",
		Short: "Write a secret: its value from --from-file or stdin, and the hosts it may go to",
		Long: `Write a secret (a new one, or a new value and hosts: sessions that use it get the new
value on their next request). The value is read from --from-file, else from stdin,
without a trailing newline; it is never printed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cf.checkOutput("table", "json"); err != nil {
				return err
			}
			if len(hosts) == 0 {
				return errors.New("give at least one --host the secret may be sent to (github.com, *.example.org)")
			}
			var r io.Reader = cmd.InOrStdin()
			if from != "" {
				f, err := os.Open(from)
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			b, err := io.ReadAll(io.LimitReader(r, 1<<20))
			if err != nil {
				return err
			}
			value := strings.TrimRight(string(b), "\r\n")
			if value == "" {
				return errors.New("the value is empty: give it on stdin or with --from-file")
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			var info workspace.SecretInfo
			if err := c.call(cmd.Context(), http.MethodPut, secretPath(args[0]), workspace.SecretInput{Value: value, Hosts: hosts}, &info, nil); err != nil {
				return err
			}
			if cf.output == "json" {
				return printJSON(cmd.OutOrStdout(), info)
			}
			fmt.Fprintln(cmd.OutOrStdout(), info.Name)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&hosts, "host", nil, "a host the secret may be sent to: name, *.name or IP, with an optional :port (repeatable)")
	cmd.Flags().StringVar(&from, "from-file", "", "read the value from this file (default: stdin)")
	return cmd
}

func secretsListCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the tenant's secrets: names, hosts and dates, never values",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cf.checkOutput("table", "json"); err != nil {
				return err
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			var list api.SecretList
			if err := c.call(cmd.Context(), http.MethodGet, "/v1/secrets", nil, &list, nil); err != nil {
				return err
			}
			if cf.output == "json" {
				return printJSON(cmd.OutOrStdout(), list)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tHOSTS\tUPDATED")
			for _, s := range list.Secrets {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, strings.Join(s.Hosts, ","), s.UpdatedAt.Format("2006-01-02 15:04:05"))
			}
			return tw.Flush()
		},
	}
}

func secretsDeleteCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME...",
		Aliases: []string{"rm"},
		Short:   "Delete secrets; sessions that use one have its placeholder refused from then on",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			var errs []error
			for _, name := range args {
				if err := c.call(cmd.Context(), http.MethodDelete, secretPath(name), nil, nil, nil); err != nil {
					if len(args) == 1 {
						return err
					}
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), name)
			}
			return errors.Join(errs...)
		},
	}
}
