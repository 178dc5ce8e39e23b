package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
)

// doneSize is the size of the done frame's header that carries res.
func doneSize(t *testing.T, res any) int {
	t.Helper()
	done, body := doneFrame(res, nil)
	if done.Error != nil {
		t.Fatalf("the answer became an error: %v", done.Error)
	}
	hdr, err := json.Marshal(done)
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > agent.MaxBody {
		t.Fatalf("body is %d bytes, a frame holds %d", len(body), agent.MaxBody)
	}
	return len(hdr)
}

// longNames makes n files with names of about 200 bytes in dir, half of them with
// characters JSON escapes to six bytes each, and returns their workspace paths.
func longNames(t *testing.T, root, dir string, n int) []string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for i := range n {
		name := fmt.Sprintf("%06d-", i) + strings.Repeat("long-name-", 19)
		if i%2 == 1 {
			name = fmt.Sprintf("%06d-", i) + strings.Repeat("<&>", 60) // 180 bytes, 1080 escaped
		}
		if err := os.WriteFile(filepath.Join(root, dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, filepath.ToSlash(filepath.Join(dir, name)))
	}
	return paths
}

func listRaw(t *testing.T, s *Server, a agent.ListArgs) agent.ListResult {
	t.Helper()
	raw, _ := json.Marshal(a)
	res, err := s.files.List(context.Background(), raw, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res.(agent.ListResult)
}

// TestListAnswerFits: a listing whose entries would not fit one frame is cut to fit,
// marked truncated, and counts what it left out, instead of failing the call.
func TestListAnswerFits(t *testing.T) {
	root := t.TempDir()
	paths := longNames(t, root, "deep/er", 12000)
	s, err := New(Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  agent.ListArgs
		total int // entries that match
	}{
		{"recursive, default options", agent.ListArgs{Path: ".", Recursive: true}, len(paths) + 2},
		{"recursive, maxEntries 100000", agent.ListArgs{Path: ".", Recursive: true, MaxEntries: 100000}, len(paths) + 2},
		{"one directory", agent.ListArgs{Path: "deep/er"}, len(paths)},
		{"files only, by glob", agent.ListArgs{Path: ".", Recursive: true, Globs: []string{"**/*name*"}, NoDirs: true, MaxEntries: 100000}, len(paths) / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := listRaw(t, s, tc.args)
			if n := doneSize(t, r); n > agent.MaxHeader {
				t.Fatalf("answer is %d bytes, a frame header holds %d", n, agent.MaxHeader)
			}
			maxE := cmpOr(tc.args.MaxEntries, fs.DefaultMaxEntries)
			if !r.Truncated || len(r.Entries) == 0 || len(r.Entries) > maxE {
				t.Fatalf("truncated = %v with %d entries, want a truncated answer of 1..%d", r.Truncated, len(r.Entries), maxE)
			}
			if got := len(r.Entries) + r.Omitted; got != tc.total {
				t.Errorf("%d entries + %d omitted = %d, want the %d that match", len(r.Entries), r.Omitted, got, tc.total)
			}
			if !sort.SliceIsSorted(r.Entries, func(i, j int) bool { return r.Entries[i].Path < r.Entries[j].Path }) {
				t.Errorf("entries are not a sorted prefix")
			}
			for _, e := range r.Entries {
				if tc.args.NoDirs && e.Type == agent.TypeDir {
					t.Fatalf("noDirs listed directory %s", e.Path)
				}
			}
		})
	}
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// TestListOmitted: a listing cut at MaxEntries counts what it left out, only what the
// globs match and the guard shows.
func TestListOmitted(t *testing.T) {
	root := t.TempDir()
	for i := range 30 {
		for _, name := range []string{"f" + strconv.Itoa(i) + ".go", "f" + strconv.Itoa(i) + ".txt"} {
			if err := os.WriteFile(filepath.Join(root, name), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	s, err := New(Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	r := listRaw(t, s, agent.ListArgs{Path: ".", Globs: []string{"*.go"}, MaxEntries: 10})
	if !r.Truncated || len(r.Entries) != 10 || r.Omitted != 20 {
		t.Errorf("cut at 10 of 30: truncated %v, %d entries, %d omitted", r.Truncated, len(r.Entries), r.Omitted)
	}
	r = listRaw(t, s, agent.ListArgs{Path: ".", Globs: []string{"*.go"}, MaxEntries: 30})
	if r.Truncated || len(r.Entries) != 30 || r.Omitted != 0 {
		t.Errorf("all 30: truncated %v, %d entries, %d omitted", r.Truncated, len(r.Entries), r.Omitted)
	}
}

// TestDoneFrameTooLarge: an answer that still would not fit one frame goes out as a
// too_large error naming the limit, never as a frame the writer refuses (which the
// host would see as a broken stream).
func TestDoneFrameTooLarge(t *testing.T) {
	big := strings.Repeat("x", agent.MaxHeader)
	for _, tc := range []struct {
		name string
		res  any
	}{
		{"header", map[string]string{"text": big}},
		{"body", &agent.TermOutput{Data: make([]byte, agent.MaxBody+1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, body := doneFrame(tc.res, nil)
			if done.Error == nil || done.Error.Code != agent.CodeTooLarge || done.Error.Rule != agent.RuleFrameSize || len(body) != 0 {
				t.Fatalf("done frame has error %v, a %d-byte result and %d bytes of body; want a too_large error", done.Error, len(done.Result), len(body))
			}
			limit := strconv.Itoa(agent.MaxHeader)
			if tc.name == "body" {
				limit = strconv.Itoa(agent.MaxBody)
			}
			if !strings.Contains(done.Error.Message, limit) {
				t.Errorf("message %q does not name the limit %s", done.Error.Message, limit)
			}
			if err := agent.WriteFrame(io.Discard, done, body); err != nil {
				t.Errorf("the error frame itself cannot be sent: %v", err)
			}
		})
	}
}

// TestTooLargeOverTheWire: through the real client, an answer too large to send and a
// request too large to send are too_large errors, not an unavailable agent, and the
// connection stays up.
func TestTooLargeOverTheWire(t *testing.T) {
	s, err := New(Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s.ops["test.big"] = func(context.Context, json.RawMessage, []byte, *op.Responder) (any, error) {
		return map[string]string{"text": strings.Repeat("y", 2*agent.MaxHeader)}, nil
	}
	dials := 0
	c := agent.NewClient(func(context.Context) (io.ReadWriteCloser, error) {
		dials++
		a, b := net.Pipe()
		go s.ServeConn(b)
		return a, nil
	}, "test", nil)
	t.Cleanup(func() { c.Close(); s.Close() })
	ctx := context.Background()

	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"answer", func() error { return c.Call(ctx, "test.big", struct{}{}, nil, nil, nil) }},
		{"request", func() error {
			_, err := c.WriteFile(ctx, agent.WriteArgs{Path: "big.bin", Create: true}, make([]byte, agent.MaxBody+1))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var we *agent.WireError
			if !errors.As(err, &we) || we.Code != agent.CodeTooLarge || errors.Is(err, agent.ErrUnavailable) {
				t.Fatalf("err = %v, want a too_large wire error and not an unavailable agent", err)
			}
			if _, err := c.Ping(ctx); err != nil {
				t.Fatalf("ping after: %v", err)
			}
		})
	}
	if dials != 1 {
		t.Errorf("%d dials, want 1: a too-large frame must not break the connection", dials)
	}
}
