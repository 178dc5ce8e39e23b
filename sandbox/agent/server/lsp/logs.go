package lsp

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
)

// logEntry is one get_server_logs entry; message is one get_server_messages entry.
// Server names the program the entry came from (all servers share the buffers).
type logEntry struct {
	Level     string `json:"level"`
	Message   string `json:"message"`
	Timestamp string `json:"timestamp"`
	Server    string `json:"server"`
}

type message struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Timestamp string `json:"timestamp"`
	Server    string `json:"server"`
}

const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func limitArg(limit *int, def int) (int, error) {
	if limit == nil {
		return def, nil
	}
	if *limit < 0 {
		return 0, agent.Errorf(agent.CodeInvalid, "", "limit must not be negative")
	}
	return *limit, nil
}

// getServerLogs returns the newest window/logMessage entries (and the servers' stderr
// lines and exits), oldest first: at most limit (default 50), at least as severe as
// min_level (error, warning, info, debug; default all).
func getServerLogs(_ context.Context, c *call, raw json.RawMessage) (any, error) {
	var a struct {
		Limit    *int    `json:"limit"`
		MinLevel *string `json:"min_level"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	n, err := limitArg(a.Limit, 50)
	if err != nil {
		return nil, err
	}
	maxRank := len(levels) - 1
	if a.MinLevel != nil && *a.MinLevel != "" {
		if maxRank = levelRank(strings.ToLower(*a.MinLevel)); maxRank < 0 {
			return nil, agent.Errorf(agent.CodeInvalid, "", "min_level must be one of %s", strings.Join(levels, ", "))
		}
	}
	out := struct {
		Logs []logEntry `json:"logs"`
	}{Logs: []logEntry{}}
	for _, e := range c.m.logs.last(n, maxRank) {
		out.Logs = append(out.Logs, logEntry{Level: e.Level, Message: e.Message, Timestamp: e.Time.Format(timeFormat), Server: e.Server})
	}
	return out, nil
}

// getServerMessages returns the newest window/showMessage (and showMessageRequest)
// entries, oldest first: at most limit (default 20).
func getServerMessages(_ context.Context, c *call, raw json.RawMessage) (any, error) {
	var a struct {
		Limit *int `json:"limit"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	n, err := limitArg(a.Limit, 20)
	if err != nil {
		return nil, err
	}
	out := struct {
		Messages []message `json:"messages"`
	}{Messages: []message{}}
	for _, e := range c.m.messages.last(n, len(levels)-1) {
		out.Messages = append(out.Messages, message{Type: e.Level, Message: e.Message, Timestamp: e.Time.Format(timeFormat), Server: e.Server})
	}
	return out, nil
}
