package agent

import (
	"context"
	"errors"
)

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
