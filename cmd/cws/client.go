package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/cwsdev/cws/api"
	"github.com/cwsdev/cws/auth"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// defaultServer is where the client commands look for cws unless told otherwise.
const defaultServer = "http://127.0.0.1:9960"

// addClientCommands adds the commands that talk to a running cws (sessions, call,
// upload, download, doctor).
func addClientCommands(root *cobra.Command, getenv func(string) string) {
	root.AddCommand(sessionsCmd(getenv), snapshotsCmd(getenv), callCmd(getenv), uploadCmd(getenv), downloadCmd(getenv), diffCmd(getenv), doctorCmd(getenv),
		portForwardCmd(getenv), portsCmd(getenv), secretsCmd(getenv), execCmd(getenv), attachCmd(getenv))
}

// clientFlags are the connection and output flags every client command takes.
type clientFlags struct {
	server  string // base URL of cws
	token   string // bearer token; empty: minted from tenants/tenant/sub, if given
	tenants string // tenants file to mint a token from
	tenant  string
	sub     string
	output  string // table, json (and raw for call)
}

// register adds the flags to fs (a parent's persistent flags, or a command's own).
func (f *clientFlags) register(fs *pflag.FlagSet, getenv func(string) string) {
	fs.StringVar(&f.server, "server", envDefault(getenv, "CWS_SERVER", defaultServer), "cws base URL [CWS_SERVER]")
	fs.StringVar(&f.token, "token", getenv("CWS_TOKEN"), "bearer token (JWT) [CWS_TOKEN]")
	fs.StringVar(&f.tenants, "tenants", getenv("CWS_TENANTS"), "without --token: tenants file to mint a token from, with --tenant and --sub [CWS_TENANTS]")
	fs.StringVar(&f.tenant, "tenant", getenv("CWS_TENANT"), "without --token: tenant to mint a token for [CWS_TENANT]")
	fs.StringVar(&f.sub, "sub", getenv("CWS_SUB"), "without --token: subject to mint a token for [CWS_SUB]")
	fs.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
}

// checkOutput rejects an -o value the command does not know.
func (f *clientFlags) checkOutput(allowed ...string) error {
	for _, a := range allowed {
		if f.output == a {
			return nil
		}
	}
	return fmt.Errorf("-o %q: want one of %s", f.output, strings.Join(allowed, ", "))
}

// client returns an API client with a token: --token, or one minted from the tenants file.
func (f *clientFlags) client() (*client, error) {
	base := strings.TrimRight(f.server, "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--server %q: want a URL such as %s", f.server, defaultServer)
	}
	tok := f.token
	if tok == "" && f.tenants != "" && f.tenant != "" && f.sub != "" {
		ts, err := auth.LoadTenants(f.tenants)
		if err != nil {
			return nil, err
		}
		t := ts.Get(f.tenant)
		if t == nil {
			return nil, fmt.Errorf("no tenant %q in %s", f.tenant, f.tenants)
		}
		if tok, err = t.Mint(f.sub, time.Hour, "", nil, time.Now()); err != nil {
			return nil, err
		}
	}
	if tok == "" {
		return nil, &hinted{errors.New("no token"),
			"pass --token or set CWS_TOKEN (`cws serve --dev` prints one), or mint one with --tenants FILE --tenant ID --sub NAME"}
	}
	return &client{base: base, token: tok, http: &http.Client{}}, nil
}

// client calls the REST API. It sets no overall timeout: archives stream for as long
// as they take, and the command's context (Ctrl-C) ends a call.
type client struct {
	base  string
	token string
	http  *http.Client
}

// do sends a request and returns the response if its status is below 400; otherwise
// the error body as an *apiError. The caller closes the body.
func (c *client) do(ctx context.Context, method, path string, body io.Reader, hdr http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("User-Agent", "cws-cli")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, connError(c.base, err)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	return resp, nil
}

// call sends in (if not nil) as JSON and decodes the response into out (if not nil).
func (c *client) call(ctx context.Context, method, path string, in, out any, hdr http.Header) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
		if hdr == nil {
			hdr = http.Header{}
		}
		hdr.Set("Content-Type", "application/json")
	}
	resp, err := c.do(ctx, method, path, body, hdr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", method, path, err)
	}
	return nil
}

// sessionPath is the API path of a session, or of something under it.
func sessionPath(id string, rest ...string) string {
	p := "/v1/sessions/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

// apiError is an error response of the API, with a hint on what to do about it.
type apiError struct {
	Status int
	Detail api.ErrorDetail
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("%s (%s", e.Detail.Message, e.Detail.Code)
	if e.Detail.RPCCode != 0 {
		s += fmt.Sprintf(", rpc %d", e.Detail.RPCCode)
	}
	s += ")"
	if h := e.hint(); h != "" {
		s += "\nHint: " + h
	}
	return s
}

// hint says what to do about an error, by its code.
func (e *apiError) hint() string {
	switch e.Detail.Code {
	case "unauthorized":
		return "check --token / CWS_TOKEN (`cws serve --dev` prints a token; `cws token --tenants FILE --tenant ID --sub NAME` mints one)"
	case "not_found":
		if strings.HasPrefix(e.Detail.Message, "no such route") {
			return "is --server a cws of the same version? (`cws version`)"
		}
		return "list sessions with `cws sessions list`"
	case "quota_exceeded":
		return "the tenant's session quota is used up: delete sessions you no longer need (`cws sessions list`, `cws sessions delete ID`)"
	case "rate_limited":
		return "the tenant's rate limit was hit: wait a moment and retry, or raise rate in the tenant's policy"
	case "policy_violation", "path_traversal", "command_not_allowed", "too_large":
		if strings.Contains(e.Detail.Message, "could not be written back") {
			return "the new workspace has no room for the snapshot's files: raise the tenant's disk limit (limits.diskMB)"
		}
		if e.Detail.Rule == "frameSize" || e.Detail.Rule == "gitOutput" { // a size limit of cws, not of the policy
			return "ask for less: a narrower path, fewer results; retrying the same call fails the same way"
		}
		h := "the tenant's policy, or the workspace's .cws-policy.json, refuses this"
		if e.Detail.Rule != "" && !strings.Contains(e.Detail.Message, e.Detail.Rule) {
			h += fmt.Sprintf(" (rule %s)", e.Detail.Rule)
		}
		return h
	case "confirmation_required":
		return "the policy wants this tool confirmed by a person: call it through an MCP client that asks"
	case "invalid_params":
		if strings.Contains(e.Detail.Message, "must be string") {
			return "--arg takes values that parse as JSON as JSON: quote it as a JSON string (--arg k='\"…\"'), or pass it in --json"
		}
		return "see the tool's arguments in /openapi.json or with an MCP client's tools/list"
	case "unavailable":
		if strings.Contains(e.Detail.Message, "could not be written back") || strings.Contains(e.Detail.Message, "from its archive") {
			return "the session's files could not be restored this time; `cws sessions get ID` shows why, and the next call tries again"
		}
		return "retry shortly; `cws doctor` checks Docker and Redis"
	case "timeout":
		return "the call ran past its deadline: ask for less, or raise the timeout option"
	case "internal":
		return "the server's log says why"
	}
	return ""
}

// readAPIError decodes an error body; anything else becomes the status and the body's start.
func readAPIError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb api.ErrorBody
	if err := json.Unmarshal(data, &eb); err == nil && eb.Error.Code != "" {
		return &apiError{Status: resp.StatusCode, Detail: eb.Error}
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	code := strings.ToLower(strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "_"))
	if resp.StatusCode == http.StatusUnauthorized {
		code = "unauthorized"
	}
	if msg == "" {
		msg = resp.Status
	}
	return &apiError{Status: resp.StatusCode, Detail: api.ErrorDetail{Code: code, Message: msg}}
}

// connError explains a failed connection.
func connError(base string, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	err = fmt.Errorf("cannot reach cws at %s: %w", base, unwrapURLError(err))
	if errors.Is(err, syscall.ECONNREFUSED) {
		return &hinted{err, "is cws running? start it with `cws serve --dev` (or point --server / CWS_SERVER at it)"}
	}
	return &hinted{err, "check --server / CWS_SERVER"}
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// hinted is an error with a line on what to do next.
type hinted struct {
	err  error
	hint string
}

func (h *hinted) Error() string { return h.err.Error() + "\nHint: " + h.hint }
func (h *hinted) Unwrap() error { return h.err }
