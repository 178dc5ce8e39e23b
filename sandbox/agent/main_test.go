package agent_test

import (
	"fmt"
	"log/slog"
	"os"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent/server/keep"
	"github.com/cwsdev/cws/sandbox/agent/server/launch"
)

// TestMain lets the test binary stand in for the agent binary, as a server's Launcher:
// run as "<test binary> keep <dir>" it is the process keeper, as "… launch …" the
// launcher, and as "… serve …" a serve of its own (serveMain).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case serveCommand:
			if err := serveMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		case keep.Command:
			if err := keep.Main(os.Args[2:], slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		case launch.Command:
			err := launch.Main(os.Args[2:])
			fmt.Fprintln(os.Stderr, err)
			os.Exit(126)
		}
	}
	os.Exit(m.Run())
}
