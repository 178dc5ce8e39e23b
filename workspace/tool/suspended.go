package tool

import "github.com/cwsdev/cws/sandbox/agent"

// SuspendedProcsKey is the session State key under which the service keeps the
// background processes a suspend ended, with the end of their output: after the wake,
// listProcesses and readProcessOutput report them as ended with EndReasonSuspended.
const SuspendedProcsKey = "procs.suspended"

// EndReasonSuspended is why a background process ended when its session was suspended.
const EndReasonSuspended = "suspended"

// SuspendedProc is one background process as it was when its session was suspended.
// Stdout and Stderr are the end of its output: they begin at StdoutStart and
// StderrStart in the process's streams.
type SuspendedProc struct {
	Info        agent.ProcInfo `json:"info"`
	Stdout      []byte         `json:"stdout,omitempty"`
	Stderr      []byte         `json:"stderr,omitempty"`
	StdoutStart int64          `json:"stdoutStart"`
	StderrStart int64          `json:"stderrStart"`
	// EndReason is EndReasonSuspended for a process the suspend ended; "" for one
	// that had ended by itself before.
	EndReason string `json:"endReason,omitempty"`
}
