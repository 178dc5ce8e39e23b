package agent

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Error codes on the wire. They are stable: the host maps them to its domain errors.
const (
	CodeNotFound  = "not_found"
	CodeExists    = "exists"
	CodeNotDir    = "not_dir"
	CodeIsDir     = "is_dir"
	CodeTraversal = "traversal" // the path escapes the workspace (.., absolute, symlink)
	CodeDenied    = "denied"    // the resolved path is denied by the guard
	CodeTooLarge  = "too_large"
	CodeInvalid   = "invalid"
	CodeNotEmpty  = "not_empty"
	CodeCanceled  = "canceled"
	CodeInternal  = "internal"
	// CodeNotEnforced refuses a command whose ExecPolicy requires Landlock where the
	// agent cannot enforce it.
	CodeNotEnforced = "not_enforced"
	// CodeUnsupported: the image lacks what the operation needs (no language server
	// for the file's language); the message says what to install.
	CodeUnsupported = "unsupported"
	CodeCommand     = "command_not_allowed" // a program the allowed commands refuse; Path names it
	// CodeLost: a background process that was lost with the agent (its keeper ended:
	// the agent or its container was restarted); the message says what is left of it.
	CodeLost = "lost"
)

// Sentinels for the codes above; a *WireError matches its code's sentinel with errors.Is.
var (
	ErrNotFound    = errors.New("not found")
	ErrExists      = errors.New("already exists")
	ErrNotDir      = errors.New("not a directory")
	ErrIsDir       = errors.New("is a directory")
	ErrTraversal   = errors.New("path escapes the workspace")
	ErrDenied      = errors.New("path denied by policy")
	ErrTooLarge    = errors.New("too large")
	ErrInvalid     = errors.New("invalid argument")
	ErrNotEmpty    = errors.New("directory not empty")
	ErrCanceled    = errors.New("canceled")
	ErrInternal    = errors.New("agent internal error")
	ErrUnsupported = errors.New("not supported in this workspace image")
	// ErrNotEnforced: Landlock is required and unavailable.
	ErrNotEnforced = errors.New("command allowlist cannot be enforced")
	ErrCommand     = errors.New("command not allowed")
	ErrLost        = errors.New("background process lost with the agent")

	// ErrVersion is returned by the client when the agent speaks another protocol.
	ErrVersion = errors.New("agent protocol version mismatch")
	// ErrUnavailable means the agent could not be reached (the stream broke or never came up).
	ErrUnavailable = errors.New("agent unavailable")
	// ErrUnresponsive means the agent stopped answering: a ping, a handshake or a call
	// went unanswered within its bound (see Liveness and Client.Call). It always comes
	// with ErrUnavailable.
	ErrUnresponsive = errors.New("the workspace agent is not responding")
	// ErrClosed means the client was shut down (see Client.Shutdown). It always comes
	// with ErrUnavailable.
	ErrClosed = errors.New("agent client closed")
)

var codeErr = map[string]error{
	CodeNotFound: ErrNotFound, CodeExists: ErrExists, CodeNotDir: ErrNotDir, CodeIsDir: ErrIsDir,
	CodeTraversal: ErrTraversal, CodeDenied: ErrDenied, CodeTooLarge: ErrTooLarge,
	CodeInvalid: ErrInvalid, CodeNotEmpty: ErrNotEmpty, CodeCanceled: ErrCanceled, CodeInternal: ErrInternal,
	CodeNotEnforced: ErrNotEnforced,
	CodeUnsupported: ErrUnsupported,
	CodeCommand:     ErrCommand,
	CodeLost:        ErrLost,
}

// WireError is an operation's failure as it travels back to the host.
type WireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Path    string `json:"path,omitempty"` // the offending workspace-relative path
	Rule    string `json:"rule,omitempty"` // the guard rule that denied it
	// Data is structured detail for the host, by code: for an invalid position,
	// {"line":{"min":1,"max":N},"character":{"min":1,"max":M}}.
	Data json.RawMessage `json:"data,omitempty"`
}

func (e *WireError) Error() string {
	if e.Path != "" && e.Rule != "" {
		return fmt.Sprintf("%s: %s (rule %s)", e.Path, e.Message, e.Rule)
	}
	if e.Path != "" {
		return fmt.Sprintf("%s: %s", e.Path, e.Message)
	}
	return e.Message
}

// Is lets errors.Is(err, agent.ErrNotFound) and friends work on wire errors.
func (e *WireError) Is(target error) bool { return codeErr[e.Code] == target }

// Errorf builds a WireError with a code and path.
func Errorf(code, path, format string, a ...any) *WireError {
	return &WireError{Code: code, Path: path, Message: fmt.Sprintf(format, a...)}
}

// InterruptedError is a command (exec, proc.start) whose stream broke before its answer
// arrived. Commands are never retried, so the caller learns whether it had started.
// It matches ErrUnavailable.
type InterruptedError struct {
	Op      string
	Started bool // the agent had accepted the command; it was stopped when the stream broke
	Err     error
}

func (e *InterruptedError) Error() string {
	if e.Started {
		return fmt.Sprintf("%s: the stream to the agent broke after the command started (it was stopped, and not run again): %v", e.Op, e.Err)
	}
	return fmt.Sprintf("%s: the stream to the agent broke before the command started (it did not run): %v", e.Op, e.Err)
}

func (e *InterruptedError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }
