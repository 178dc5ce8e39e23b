package server

import (
	"context"
	"errors"
	"io/fs"
	"syscall"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
)

// wireError turns any error into the wire form with a stable code. Causes of internal
// errors are kept in the message: the host decides what its own clients may see.
func wireError(err error) *agent.WireError {
	var we *agent.WireError
	if errors.As(err, &we) {
		return we
	}
	var d *guard.Denied
	if errors.As(err, &d) {
		return &agent.WireError{Code: agent.CodeDenied, Path: d.Path, Rule: d.Rule, Message: "path not allowed by policy"}
	}
	code := agent.CodeInternal
	switch {
	case errors.Is(err, guard.ErrBadPath):
		code = agent.CodeTraversal
	case errors.Is(err, fs.ErrNotExist):
		code = agent.CodeNotFound
	case errors.Is(err, syscall.ENOTEMPTY): // before ErrExist, which it also matches
		code = agent.CodeNotEmpty
	case errors.Is(err, fs.ErrExist):
		code = agent.CodeExists
	case errors.Is(err, syscall.ENOTDIR):
		code = agent.CodeNotDir
	case errors.Is(err, syscall.EISDIR):
		code = agent.CodeIsDir
	case errors.Is(err, syscall.EFBIG), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		code = agent.CodeTooLarge
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		code = agent.CodeCanceled
	}
	we = &agent.WireError{Code: code, Message: err.Error()}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		we.Message = pe.Err.Error()
		we.Path = pe.Path
	}
	return we
}
