package keep

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Ids are "p<N>-<run>". N counts the background processes of one run of the sandbox,
// and goes on across serve and keeper restarts. run names that run: the first keeper
// after the container started makes it and keeps it on the container's /tmp, which a
// container restart empties (a keeper in memory makes its own). An id of another run
// names a process that was lost with the agent, and never one of this run.

const runName = "run" // the run's name, in the keeper's directory

func newRun() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// loadRun reads the run's name from dir; "" when none was made.
func loadRun(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, runName))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if r := strings.TrimSpace(string(b)); validRun(r) {
		return r, nil
	}
	return "", nil
}

// ensureRun reads the run's name from dir, making it when there is none.
func ensureRun(dir string) (string, error) {
	r, err := loadRun(dir)
	if err != nil || r != "" {
		return r, err
	}
	// Written in place, not renamed: a torn write reads as no name, and a new one is made.
	r = newRun()
	return r, os.WriteFile(filepath.Join(dir, runName), []byte(r+"\n"), 0o600)
}

func validRun(r string) bool {
	_, err := hex.DecodeString(r)
	return len(r) == 8 && err == nil
}

func formatID(n int, run string) string { return "p" + strconv.Itoa(n) + "-" + run }

// parseID splits an id into its number and run.
func parseID(id string) (n int, run string, ok bool) {
	num, run, found := strings.Cut(strings.TrimPrefix(id, "p"), "-")
	n, err := strconv.Atoi(num)
	if !strings.HasPrefix(id, "p") || !found || err != nil || n <= 0 || !validRun(run) {
		return 0, "", false
	}
	return n, run, true
}

// idNumber is N of an id, 0 for anything that is no id.
func idNumber(id string) int {
	n, _, _ := parseID(id)
	return n
}
