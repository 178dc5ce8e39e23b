// Package op is the contract between the agent's dispatcher (package server) and the
// operations it serves: the Handler each operation is, the Responder its events go out
// through, Decode for its arguments, and the Budget a growing answer keeps within.
package op

import (
	"context"
	"encoding/json"

	"github.com/cwsdev/cws/sandbox/agent"
)

// Handler runs one operation. It may send events through r while it runs; its result
// goes out in the done frame.
type Handler func(ctx context.Context, args json.RawMessage, body []byte, r *Responder) (any, error)

// Decode unmarshals an operation's arguments into v; no arguments leave v as it is.
func Decode(args json.RawMessage, v any) error {
	if len(args) == 0 {
		return nil
	}
	if err := json.Unmarshal(args, v); err != nil {
		return agent.Errorf(agent.CodeInvalid, "", "bad arguments: %v", err)
	}
	return nil
}
