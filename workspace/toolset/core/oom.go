package core

import (
	"fmt"

	"github.com/cwsdev/cws/sandbox/agent"
)

// explainOOM says so when the memory limit killed a command, instead of leaving the
// caller with a bare SIGKILL or exit code 137.
func explainOOM(res *RunCommandResult, r agent.ExecResult) {
	if !r.OOMKilled {
		return
	}
	res.Reason = "oom"
	limit := "its memory limit"
	if r.MemoryLimitBytes > 0 {
		limit = fmt.Sprintf("its memory limit (%d MiB)", r.MemoryLimitBytes>>20)
	}
	res.Hint = "the command was killed because the workspace ran out of memory: it reached " + limit +
		". Use less memory (smaller inputs, fewer parallel jobs), or ask for a larger memoryMB limit in the tenant's policy."
}
