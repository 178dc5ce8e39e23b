package main

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

func TestRestoreLog(t *testing.T) {
	var out bytes.Buffer
	log, seen := newRestoreLog(&env{progress: &out})
	if _, _, ok := seen.last(); ok {
		t.Fatal("a restore seen before any was logged")
	}
	log = log.With("component", "workspace") // the service may derive its logger
	log.Info("archive restored", "session", "s-1", "sandbox_ready", 80*time.Millisecond, "restore", 1500*time.Millisecond)
	log.Info("session woke", "took", time.Second)
	log.Warn("wake failed", "err", "boom")
	log.Debug("restore: tar.in", "tar_in", time.Second, "store_waited_for_agent", 300*time.Millisecond)
	log.Debug("agent stream: dialled", "took", time.Millisecond)
	ready, took, ok := seen.last()
	if !ok || ready != 80*time.Millisecond || took != 1500*time.Millisecond || seen.count() != 1 {
		t.Errorf("last = %v, %v, %v (count %d); want 80ms, 1.5s", ready, took, ok, seen.count())
	}
	if s := out.String(); !strings.Contains(s, "wake failed") || !strings.Contains(s, "store_waited_for_agent=300ms") ||
		strings.Contains(s, "session woke") || strings.Contains(s, "archive restored") || strings.Contains(s, "dialled") {
		t.Errorf("progress got %q: want the warning and the restore's waits alone", s)
	}
}

func TestBigTree(t *testing.T) {
	var a, b bytes.Buffer
	if err := bigTree(&a, 2000, 7, nil); err != nil {
		t.Fatal(err)
	}
	if err := bigTree(&b, 2000, 7, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the same seed made two trees")
	}
	tr := tar.NewReader(&a)
	var files int
	var total int64
	sizes := map[int64]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files++
		total += h.Size
		sizes[h.Size] = true
	}
	if files != 2000 || len(sizes) < 500 {
		t.Errorf("%d files of %d sizes, want 2000 of varied sizes", files, len(sizes))
	}
	if mean := total / int64(files); mean < bigMean*8/10 || mean > bigMean*12/10 {
		t.Errorf("mean size %d, want about %d (100,000 files make 500 MB)", mean, bigMean)
	}
}

func TestBudget(t *testing.T) {
	if got := budget(20 << 20); got != 12.5 {
		t.Errorf("budget(20 MiB) = %g, want 12.5", got)
	}
	for n, want := range map[int64]string{7: "7", 2074: "2,074", 100000: "100,000", 1234567: "1,234,567"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
