package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

func callCmd(getenv func(string) string) *cobra.Command {
	var cf clientFlags
	var kvs []string
	var jsonArg string
	cmd := &cobra.Command{
		Use:   "call SESSION TOOL [--arg key=value]... [--json JSON|@FILE|-]",
		Short: "Call a tool in a session",
		Long: `Call one tool (readFile, writeFile, runCommand, gitStatus, …) in a session, as an
agent would over MCP, and print its result.

Arguments come from --json (an object: inline, @file.json, or - for stdin) and then
--arg key=value, which sets one key on top. A value that parses as JSON is taken as
JSON (42, true, null, ["a","b"], {"x":1}); anything else is a string. To pass a
string that looks like JSON, quote it: --arg contents='"42"'. Dotted keys nest:
--arg options.recursive=true gives {"options":{"recursive":true}}.

Output (-o):
  table  the result as indented JSON (the default)
  json   the whole response: {"result": …, "isError": …}
  raw    the payload itself: readFile's content (binary decoded), runCommand's
         stdout and stderr (exiting with the command's exit code), gitDiff's diff

A call the tool reports as failed (file not found, non-zero exit) exits 1. A call
the server refuses (policy, bad arguments) prints the error's code and rule.

Examples:
  cws call "$ID" writeFile --arg path=hello.txt --arg contents='hi there'
  cws call "$ID" readFile --arg path=hello.txt -o raw
  cws call "$ID" runCommand --arg command=go --arg args='["test","./..."]' -o raw
  cws call "$ID" listFiles --arg path=. --arg options.recursive=true
  cws call "$ID" applyPatch --json @patch-args.json
  echo '{"path":"go.mod"}' | cws call "$ID" readFile --json -`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cf.checkOutput("table", "json", "raw"); err != nil {
				return err
			}
			body, err := toolArgs(jsonArg, kvs, cmd.InOrStdin())
			if err != nil {
				return err
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			session, tool := args[0], args[1]
			hdr := http.Header{"Content-Type": {"application/json"}}
			resp, err := c.do(cmd.Context(), http.MethodPost, sessionPath(session, "tools", tool), bytes.NewReader(body), hdr)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var res struct {
				Result  json.RawMessage `json:"result"`
				IsError bool            `json:"isError"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
				return fmt.Errorf("call %s: decode response: %w", tool, err)
			}
			return printToolResult(cmd.OutOrStdout(), cmd.ErrOrStderr(), cf.output, tool, res.Result, res.IsError)
		},
	}
	cf.register(cmd.Flags(), getenv)
	cmd.Flags().Lookup("output").Usage = "output format: table, json or raw"
	cmd.Flags().StringArrayVar(&kvs, "arg", nil, "argument key=value; JSON values are parsed, dotted keys nest (repeatable)")
	cmd.Flags().StringVar(&jsonArg, "json", "", "arguments as a JSON object: inline, @FILE, or - for stdin")
	return cmd
}

// toolArgs builds the call's JSON body from --json and then the --arg flags.
func toolArgs(jsonArg string, kvs []string, stdin io.Reader) ([]byte, error) {
	args := map[string]any{}
	if jsonArg != "" {
		data := []byte(jsonArg)
		var err error
		switch {
		case jsonArg == "-":
			data, err = io.ReadAll(stdin)
		case strings.HasPrefix(jsonArg, "@"):
			data, err = os.ReadFile(jsonArg[1:])
		}
		if err != nil {
			return nil, fmt.Errorf("--json: %w", err)
		}
		if err := json.Unmarshal(data, &args); err != nil || args == nil {
			return nil, fmt.Errorf("--json: want a JSON object of the tool's arguments, e.g. '{\"path\":\"go.mod\"}'")
		}
	}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--arg %q: want key=value", kv)
		}
		if err := setPath(args, strings.Split(k, "."), argValue(v)); err != nil {
			return nil, fmt.Errorf("--arg %s: %w", k, err)
		}
	}
	return json.Marshal(args)
}

// argValue is v as JSON if it parses as JSON, else v as a string.
func argValue(v string) any {
	var x any
	if err := json.Unmarshal([]byte(v), &x); err == nil {
		return x
	}
	return v
}

// setPath sets m[keys[0]][keys[1]]… = v, creating the objects on the way.
func setPath(m map[string]any, keys []string, v any) error {
	for i, k := range keys[:len(keys)-1] {
		if k == "" {
			return fmt.Errorf("empty key part")
		}
		next, ok := m[k]
		if !ok || next == nil {
			n := map[string]any{}
			m[k], m = n, n
			continue
		}
		n, ok := next.(map[string]any)
		if !ok {
			return fmt.Errorf("%s is already set to a non-object", strings.Join(keys[:i+1], "."))
		}
		m = n
	}
	last := keys[len(keys)-1]
	if last == "" {
		return fmt.Errorf("empty key part")
	}
	m[last] = v
	return nil
}

// printToolResult writes a tool's result in the chosen format; a failed call ends in
// an error (exit 1, or the command's exit code in raw mode).
func printToolResult(stdout, stderr io.Writer, format, tool string, result json.RawMessage, isError bool) error {
	if format == "json" {
		if err := printJSON(stdout, map[string]any{"result": result, "isError": isError}); err != nil {
			return err
		}
		if isError {
			return exitError{1}
		}
		return nil
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(result, &fields)
	if isError {
		// A failure without a typed result: {"error":{"code","message","path"}}.
		var f struct {
			Error struct{ Code, Message, Path string } `json:"error"`
		}
		if _, ok := fields["error"]; ok && json.Unmarshal(result, &f) == nil && f.Error.Code != "" {
			return fmt.Errorf("%s failed: %s (%s)", tool, f.Error.Message, f.Error.Code)
		}
	}
	if format == "raw" {
		if done, err := printRaw(stdout, stderr, fields); done {
			if err == nil && isError {
				err = exitError{1}
			}
			return err
		}
	}
	var v any
	if err := json.Unmarshal(result, &v); err != nil {
		return fmt.Errorf("%s: result is not JSON: %w", tool, err)
	}
	if err := printJSON(stdout, v); err != nil {
		return err
	}
	if isError {
		return exitError{1}
	}
	return nil
}

// printRaw writes the payload of a result it knows (content, stdout/stderr, diff,
// output) and reports whether it did.
func printRaw(stdout, stderr io.Writer, fields map[string]json.RawMessage) (bool, error) {
	str := func(k string) (string, bool) {
		var s string
		raw, ok := fields[k]
		if !ok || json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return s, true
	}
	if content, ok := str("content"); ok {
		var binary bool
		_ = json.Unmarshal(fields["isBinary"], &binary)
		if binary {
			b, err := base64.StdEncoding.DecodeString(content)
			if err != nil {
				return true, fmt.Errorf("decode binary content: %w", err)
			}
			_, err = stdout.Write(b)
			return true, err
		}
		_, err := io.WriteString(stdout, content)
		return true, err
	}
	out, hasOut := str("stdout")
	errOut, hasErr := str("stderr")
	if hasOut || hasErr {
		_, _ = io.WriteString(stdout, out)
		_, _ = io.WriteString(stderr, errOut)
		var code int
		if raw, ok := fields["exitCode"]; ok && json.Unmarshal(raw, &code) == nil && code != 0 {
			return true, exitError{code}
		}
		return true, nil
	}
	for _, k := range []string{"diff", "output"} {
		if s, ok := str(k); ok {
			_, err := io.WriteString(stdout, s)
			return true, err
		}
	}
	return false, nil
}
