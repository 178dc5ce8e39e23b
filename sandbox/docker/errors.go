package docker

import (
	"fmt"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/cwsdev/cws/sandbox"
)

// Errors the driver returns, wrapped with context. Compare with errors.Is.
var (
	// ErrNotFound: the sandbox (container) does not exist.
	ErrNotFound = sandbox.ErrNotFound
	// ErrStopped: the sandbox exists but is not running; Start brings it back.
	ErrStopped = sandbox.ErrStopped
	// ErrExists: Create found a container or workspace volume of that session already.
	ErrExists = sandbox.ErrExists
	// ErrInvalid: the spec is unusable (bad session id, uid:gid or env name, or an image
	// that is not present on the engine).
	ErrInvalid = sandbox.ErrInvalid
)

// notFound wraps a Docker error about a missing container as ErrNotFound (keeping
// Docker's message), and anything else with plain context.
func notFound(op, id string, err error) error {
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("%s %s: %w: %v", op, id, ErrNotFound, err)
	}
	return fmt.Errorf("%s %s: %w", op, id, err)
}
