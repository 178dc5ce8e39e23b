package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/spf13/cobra"
)

func tokenCmd(getenv func(string) string) *cobra.Command {
	var tenantsFile, tenant, sub, session, scope string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "token --tenants FILE --tenant ID --sub NAME",
		Short: "Print a JWT for an HS256 tenant (for development and CI)",
		Long: `Print a signed JWT for a tenant whose tenants-file entry has an HS256 key.

The token carries iss, aud, sub, tenant, iat, nbf and exp; --session binds it to one
session (its /mcp calls then reach only that session).

Examples:
  cws token --tenants tenants.yaml --tenant acme --sub ci-job-42
  cws token --tenants tenants.yaml --tenant acme --sub me --ttl 8h --session s-abc`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenantsFile == "" {
				return fmt.Errorf("--tenants is required (or set CWS_TENANTS)")
			}
			ts, err := auth.LoadTenants(tenantsFile)
			if err != nil {
				return err
			}
			t := ts.Get(tenant)
			if t == nil {
				var ids []string
				for _, x := range ts.List() {
					ids = append(ids, x.ID)
				}
				return fmt.Errorf("no tenant %q in %s (it has: %s)", tenant, tenantsFile, strings.Join(ids, ", "))
			}
			var scopes []string
			if scope != "" {
				scopes = strings.Fields(scope)
			}
			tok, err := t.Mint(sub, ttl, session, scopes, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tenantsFile, "tenants", getenv("CWS_TENANTS"), "tenants file (YAML) [CWS_TENANTS]")
	f.StringVar(&tenant, "tenant", "", "tenant id")
	f.StringVar(&sub, "sub", "", "subject (who the token is for)")
	f.DurationVar(&ttl, "ttl", time.Hour, "lifetime")
	f.StringVar(&session, "session", "", "bind the token to this session id")
	f.StringVar(&scope, "scope", "", "space-separated scopes")
	_ = cmd.MarkFlagRequired("tenant")
	_ = cmd.MarkFlagRequired("sub")
	return cmd
}
