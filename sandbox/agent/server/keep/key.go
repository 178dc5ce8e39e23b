package keep

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

// The keeper's key. Where the keeper runs as a uid of the agent's own, its socket sits
// in a directory the workspace user can't enter. In same-uid mode (the agent is the
// tool user, a Kubernetes pod) every tool process could connect to it, and hand the
// keeper a process of its making (whose pid serve would later signal, for killProcess)
// or stand in for it. So there serve and each keeper it starts share a key, which
// every connection proves first, both ways (agent.AuthenticateAgent from serve,
// agent.AuthenticateHost from the keeper: the keeper's answer reveals nothing a forger
// could use, and serve says nothing before the keeper proved itself). The key comes
// from init, which outlives every serve (SetKey), and reaches each keeper through a
// pipe, never its environment. No key: no handshake, as before.

// envKeyFD names, in a keeper's environment, the descriptor its key arrives on.
const envKeyFD = "CWS_KEEPER_KEY_FD"

// keyTimeout bounds a connection's handshake.
const keyTimeout = 5 * time.Second

var key atomic.Pointer[[]byte]

// SetKey sets what serve and its keepers prove to each other on every connection:
// the keeper serve starts from now on gets it too. Empty means none.
func SetKey(k []byte) {
	if len(k) == 0 {
		key.Store(nil)
		return
	}
	k = append([]byte(nil), k...)
	key.Store(&k)
}

func currentKey() []byte {
	if k := key.Load(); k != nil {
		return *k
	}
	return nil
}

// proveKeeper is serve's side: the keeper at the other end of c must prove the key
// before anything is sent to it.
func proveKeeper(c net.Conn) error {
	k := currentKey()
	if k == nil {
		return nil
	}
	_ = c.SetDeadline(time.Now().Add(keyTimeout))
	if err := agent.AuthenticateAgent(c, k); err != nil {
		return fmt.Errorf("process keeper: %w", err)
	}
	return c.SetDeadline(time.Time{})
}

// proveServe is the keeper's side, on each connection it accepts.
func proveServe(c net.Conn) error {
	k := currentKey()
	if k == nil {
		return nil
	}
	_ = c.SetDeadline(time.Now().Add(keyTimeout))
	if err := agent.AuthenticateHost(c, k); err != nil {
		return err
	}
	return c.SetDeadline(time.Time{})
}

// keyPipe returns the read end of a pipe that holds the key, for a keeper about to
// start; nil without a key.
func keyPipe() (*os.File, error) {
	k := currentKey()
	if k == nil {
		return nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	_, err = w.Write(k)
	w.Close()
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// takeKey is a keeper's: it reads the key from the descriptor its environment names
// (envKeyFD), if any, and sets it.
func takeKey() error {
	v := os.Getenv(envKeyFD)
	os.Unsetenv(envKeyFD)
	if v == "" {
		return nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return fmt.Errorf("%s=%q", envKeyFD, v)
	}
	syscall.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), "keeper-key")
	defer f.Close()
	k, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return fmt.Errorf("keeper key: %w", err)
	}
	if len(k) == 0 {
		return fmt.Errorf("keeper key: empty")
	}
	SetKey(k)
	return nil
}
