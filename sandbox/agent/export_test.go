package agent

import (
	"context"
	"errors"
	"time"
)

// CallTimeout is how long a call of op with args may take (0: only its idle bound).
func CallTimeout(op string, args any) time.Duration { return callTimeout(op, args) }

// WithCallTimeout bounds ctx as a call's own timeout of d would.
func WithCallTimeout(ctx context.Context, op string, d time.Duration) (context.Context, context.CancelFunc) {
	return withCallTimeout(ctx, op, d)
}

// RawCall sends one request frame as it is (its ID included) and returns the done
// frame, with a failure as its Error; for tests of the wire protocol.
func RawCall(ctx context.Context, c *Client, req *Header) (*Header, error) {
	err := c.do(ctx, req.Op, req, nil, nil, nil, nil, new(bool))
	var we *WireError
	if errors.As(err, &we) {
		return &Header{Done: true, Error: we}, nil
	}
	return &Header{Done: true}, err
}
