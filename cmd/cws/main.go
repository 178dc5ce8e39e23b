// Command cws is the Coding Workspace Service: one binary for the server (`cws serve`),
// dev tokens (`cws token`), and the client commands operators and CI jobs use
// (`cws sessions`, `cws call`, `cws upload`, `cws download`, `cws doctor`).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

// exitError ends the process with a code and no further message.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// run builds the command tree and executes it; getenv supplies the CWS_* fallbacks.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	root := &cobra.Command{
		Use:   "cws",
		Short: "cws — the Coding Workspace Service",
		Long: `cws gives every AI agent a sandboxed container workspace of its own.

Agents authenticate with their platform's JWT and call file, search, git and command
tools over MCP (/mcp) or REST (/v1). Every call is limited by the tenant's
.cws-policy.json.

Start a local server with a dev token:
  cws serve --dev

Every flag has a CWS_* environment fallback (--redis-url ↔ CWS_REDIS_URL).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(serveCmd(getenv), tokenCmd(getenv), healthcheckCmd(getenv), versionCmd(), socketDirCmd(getenv))
	addClientCommands(root, getenv)
	return root.ExecuteContext(ctx)
}

// envDefault returns the environment's value for key, or def.
func envDefault(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}
