package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cwsdev/cws/sandbox/docker"
)

// socketDirCmd prepares the agents' socket directory for a cws that runs as another
// uid than root: cws makes it itself when it may, but a directory that a container
// runtime created (a compose bind mount, a Kubernetes hostPath) belongs to root.
func socketDirCmd(getenv func(string) string) *cobra.Command {
	var owner string
	cmd := &cobra.Command{
		Use:   "agent-socket-dir [DIR]",
		Short: "Create the agents' socket directory, mode 0700, owned by the uid cws serve runs as",
		Long: `Create the directory of the agents' sockets (--agent-socket-dir), mode 0700, owned by
--owner: run it once as root before a non-root cws serve (docker-compose.yml and the
Helm chart run it as an init step). cws serve then gives each workspace container its
own directory inside, bind-mounted at /.cws-run, and dials its agent there.

Examples:
  sudo cws agent-socket-dir --owner 65532:65532 /var/run/cws/agent`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := envDefault(getenv, "CWS_AGENT_SOCKET_DIR", docker.DefaultSocketDir)
			if len(args) == 1 {
				dir = args[0]
			}
			uid, gid, err := parseOwner(owner)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			// chmod first: once the directory is another uid's, root needs CAP_FOWNER.
			if err := os.Chmod(dir, 0o700); err != nil {
				return err
			}
			if err := os.Chown(dir, uid, gid); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: mode 0700, owner %d:%d\n", dir, uid, gid)
			return nil
		},
	}
	cmd.Flags().StringVar(&owner, "owner", "65532:65532", "uid:gid that cws serve runs as")
	return cmd
}

func parseOwner(s string) (int, int, error) {
	u, g, ok := strings.Cut(s, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("--owner %q: want uid:gid, e.g. 65532:65532", s)
	}
	return uid, gid, nil
}
