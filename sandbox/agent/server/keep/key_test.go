package keep

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

// TestKeeperKey: with a key (same-uid mode), the keeper process serve starts gets it
// through a pipe, and serve and the keeper prove it to each other: a connection that
// does not prove it gets nothing from the keeper, and a forged keeper (anything else
// listening on the keeper's socket) gets nothing from serve, whose call fails.
func TestKeeperKey(t *testing.T) {
	bin, err := os.Executable()
	must(t, err)
	SetKey([]byte("0123456789abcdef0123456789abcdef"))
	t.Cleanup(func() { SetKey(nil) })
	dir := filepath.Join(t.TempDir(), "procs")
	t.Cleanup(func() { killKeepers(t, dir) })
	c := NewClient(dir, bin, nil)
	_, pi := adopt(t, c, "echo keyed; sleep 1000")
	readUntil(t, c, pi.ID, "keyed\n", "")
	if ps, err := c.List(ctxT(t)); err != nil || len(ps) != 1 {
		t.Fatalf("List with the key: %v, %v", ps, err)
	}
	for _, pid := range keeperPIDs(t, dir) {
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if bytes.Contains(env, []byte("0123456789abcdef")) {
			t.Errorf("the key is in the keeper's environment")
		}
	}

	// A caller without the key: a request line gets no answer, the connection ends.
	raw, err := net.Dial("unix", socketPath(dir))
	must(t, err)
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = raw.Write([]byte(`{"op":"list"}` + "\n"))
	if b, err := io.ReadAll(bufio.NewReader(raw)); len(b) != 0 || err != nil && !errors.Is(err, io.EOF) && !isReset(err) {
		t.Errorf("a caller without the key got %q, %v; want nothing", b, err)
	}

	// A forged keeper: it answers every line, but can't prove the key.
	forged := filepath.Join(t.TempDir(), "forged")
	must(t, os.MkdirAll(forged, 0o700))
	l, err := net.Listen("unix", socketPath(forged))
	must(t, err)
	defer l.Close()
	heard := make(chan []byte, 4)
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				b := make([]byte, 4096)
				n, _ := conn.Read(b)
				heard <- b[:n]
				_, _ = conn.Write([]byte(`{"result":[]}` + "\n"))
			}()
		}
	}()
	fc := NewClient(forged, "", nil)
	if _, err := fc.List(ctxT(t)); !errors.Is(err, agent.ErrAuth) {
		t.Errorf("List from a forged keeper: %v, want %v", err, agent.ErrAuth)
	}
	select {
	case b := <-heard:
		if bytes.Contains(b, []byte(`"op"`)) {
			t.Errorf("serve sent a request to a forged keeper: %q", b)
		}
	case <-time.After(10 * time.Second):
		t.Error("the forged keeper heard nothing")
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne)
}
