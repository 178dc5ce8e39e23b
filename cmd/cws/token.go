package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/spf13/cobra"
)

func tokenCmd(getenv func(string) string) *cobra.Command {
	var tenantsFile, tenant, sub, session string
	var scope []string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "token --tenants FILE --tenant ID --sub NAME",
		Short: "Print a JWT for an HS256 tenant (for development and CI)",
		Long: `Print a signed JWT for a tenant whose tenants-file entry has an HS256 key.

The token carries iss, aud, sub, tenant, iat, nbf and exp; --session binds it to one
session (its /mcp calls then reach only that session).

--scope limits what it may do (repeatable; each value may list several, separated by
spaces or commas):
  tools:read   read-only tools          tools:write  tools that change files
  tools:exec   commands and processes   sessions     create/list/get/renew/delete
  archive      upload and download the whole tree (deniedPaths do not apply)
Without --scope the token has no scope claim and gets the tenant's defaultScopes
(all of them unless the tenants file says otherwise).

Examples:
  cws token --tenants tenants.yaml --tenant acme --sub ci-job-42
  cws token --tenants tenants.yaml --tenant acme --sub agent-7 --session s-abc --scope "tools:read tools:write tools:exec"
  cws token --tenants tenants.yaml --tenant acme --sub me --ttl 8h --scope tools:read --scope sessions`,
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
			scopes, err := auth.ParseScopes(scope...)
			if err != nil {
				return fmt.Errorf("--scope: %w", err)
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
	f.StringArrayVar(&scope, "scope", nil, "scopes to grant, space- or comma-separated; repeatable (default: the tenant's defaultScopes)")
	_ = cmd.MarkFlagRequired("tenant")
	_ = cmd.MarkFlagRequired("sub")
	return cmd
}
