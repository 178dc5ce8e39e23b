package mcp

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// failed maps a failed tool call's error to its JSON-RPC error, logs it at warn
// (tenant, session, tool, code, duration, and for internal errors the cause; never
// the arguments) and counts it by code.
func (h *Handler) failed(ctx context.Context, tenant, session, tool string, start time.Time, err error) *jsonrpc.Error {
	e := rpcError(err)
	attrs := []slog.Attr{
		slog.String("tenant", tenant), slog.String("session", session), slog.String("tool", tool),
		slog.Int64("code", e.Code), slog.Float64("duration_seconds", time.Since(start).Seconds()),
	}
	if e.Code == CodeInternal {
		attrs = append(attrs, slog.Any("err", err)) // operators need the cause; clients never see it
	}
	h.log.LogAttrs(ctx, slog.LevelWarn, "tool call failed", attrs...)
	h.cfg.OnCallFailed(strconv.FormatInt(e.Code, 10))
	return e
}
