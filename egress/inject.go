package egress

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/cwsdev/cws/secrets"
)

// Secret is one credential the proxy may put into a session's requests: where the
// workspace sends Placeholder to one of Hosts, the proxy sends the value.
type Secret struct {
	Env, Name   string // the variable that holds the placeholder, and the secret's name
	Placeholder string
	Hosts       Rules // where the value may go
	// Value returns the value in force now: a rotation applies to the next request.
	// Its error must not hold the value.
	Value func(ctx context.Context) (string, error)
}

// sendsTo reports whether the secret may go to host:port.
func (s Secret) sendsTo(host string, port int) bool {
	ok, _ := s.Hosts.Allows(host, port)
	return ok
}

// anyFor reports whether a secret of secs may go to host:port: then the proxy opens
// that host's TLS to put it in.
func anyFor(secs []Secret, host string, port int) bool {
	return slices.ContainsFunc(secs, func(s Secret) bool { return s.sendsTo(host, port) })
}

// refusal is a request the proxy won't send, with the status and the reason the
// workspace gets (never a value).
type refusal struct {
	status int
	reason string
	secret string // the secret's name, when the placeholder is one of the session's
}

func (r *refusal) Error() string { return r.reason }

// hasPlaceholder reports whether h or the request target holds something that looks
// like a placeholder: only then are the session's secrets looked up.
func hasPlaceholder(h http.Header, uri string) bool {
	if strings.Contains(uri, "cws-secret-") {
		return true
	}
	for k, vs := range h {
		for _, v := range vs {
			if strings.Contains(v, "cws-secret-") {
				return true
			}
			if k == "Authorization" && isBasic(v) {
				if d, ok := decodeBasic(v); ok && strings.Contains(d, "cws-secret-") {
					return true
				}
			}
		}
	}
	return false
}

// inject puts into h the value of every placeholder of secs that may go to
// host:port: in every header value, and inside Authorization: Basic (decoded, replaced,
// encoded again). Bodies are never touched, nor a placeholder split or encoded other
// than as it was handed out. A placeholder that is not one of secs, or whose secret
// may not go to host, refuses the whole request: nothing of it is sent. It returns the
// names of the secrets it put in.
func inject(ctx context.Context, h http.Header, host string, port int, secs []Secret) ([]string, error) {
	var used []string
	values := map[string]string{} // placeholder → value, asked once per request
	replace := func(s string) (string, error) {
		for _, ph := range secrets.FindPlaceholders(s) {
			v, ok := values[ph]
			if !ok {
				i := slices.IndexFunc(secs, func(x Secret) bool { return x.Placeholder == ph })
				if i < 0 {
					return "", &refusal{http.StatusForbidden, "egress: a secret placeholder that is not this session's may not be sent (" + envOf(ph) + ")", ""}
				}
				sec := secs[i]
				if !sec.sendsTo(host, port) {
					return "", &refusal{http.StatusForbidden, fmt.Sprintf("egress: secret %s (%s) may not be sent to %s", sec.Env, sec.Name, host), sec.Name}
				}
				val, err := sec.Value(ctx)
				if err != nil {
					return "", &refusal{http.StatusBadGateway, fmt.Sprintf("egress: secret %s (%s) can't be used, nothing was sent: %v", sec.Env, sec.Name, err), sec.Name}
				}
				values[ph] = val
				v = val
				if !slices.Contains(used, sec.Name) {
					used = append(used, sec.Name)
				}
			}
			s = strings.ReplaceAll(s, ph, v)
		}
		return s, nil
	}
	for k, vs := range h {
		for i, v := range vs {
			if k == "Authorization" && isBasic(v) {
				if d, ok := decodeBasic(v); ok && strings.Contains(d, "cws-secret-") {
					r, err := replace(d)
					if err != nil {
						return nil, err
					}
					vs[i] = v[:len("Basic ")] + base64.StdEncoding.EncodeToString([]byte(r))
					continue
				}
			}
			r, err := replace(v)
			if err != nil {
				return nil, err
			}
			vs[i] = r
		}
	}
	return used, nil
}

// envOf is the variable name inside a placeholder, for messages.
func envOf(ph string) string {
	s := strings.TrimPrefix(ph, "cws-secret-")
	if i := strings.LastIndexByte(s, '-'); i > 0 {
		return s[:i]
	}
	return s
}

func isBasic(v string) bool { return len(v) > 6 && strings.EqualFold(v[:6], "Basic ") }

func decodeBasic(v string) (string, bool) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v[6:]))
	return string(b), err == nil
}

// injectRequest is inject for a whole request: a URL userinfo is
// turned into Authorization: Basic (as a client does) and injected there; one
// elsewhere in the target (path, query) is refused, since a value there would land in
// the server's logs.
func injectRequest(ctx context.Context, req *http.Request, host string, port int, secs []Secret) ([]string, error) {
	if u := req.URL.User; u != nil {
		if req.Header.Get("Authorization") == "" {
			p, _ := u.Password()
			req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+p)))
		}
		req.URL.User = nil
	}
	if strings.Contains(req.URL.String(), "cws-secret-") {
		return nil, &refusal{http.StatusForbidden, "egress: a secret placeholder may be sent in a header or the URL's userinfo, not in the URL's path or query", ""}
	}
	return inject(ctx, req.Header, host, port, secs)
}

// injectPlain is injectRequest for a plain-HTTP request. There nothing but DNS binds
// the value to the host, and anyone on the path reads it: a secret goes over plain
// HTTP only to a port its hosts name explicitly ("registry.internal:4873"); a host
// without a port ("github.com") means HTTPS.
func injectPlain(ctx context.Context, req *http.Request, host string, port int, secs []Secret) ([]string, error) {
	probe := req.Header.Clone()
	if u := req.URL.User; u != nil && probe.Get("Authorization") == "" {
		p, _ := u.Password()
		probe.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+p)))
	}
	for _, s := range secs {
		if headerHolds(probe, s.Placeholder) && s.sendsTo(host, port) && !s.Hosts.NamesPort(host, port) {
			return []string{s.Name}, &refusal{http.StatusForbidden, fmt.Sprintf("egress: secret %s is sent only over HTTPS to %s (or over plain HTTP to a port its hosts name, as %s:%d): use https://", s.Name, host, host, port), s.Name}
		}
	}
	return injectRequest(ctx, req, host, port, secs)
}

// headerHolds reports whether a header value (or a Basic credential's decoded form)
// holds the placeholder.
func headerHolds(h http.Header, placeholder string) bool {
	for k, vs := range h {
		for _, v := range vs {
			if strings.Contains(v, placeholder) {
				return true
			}
			if k == "Authorization" && isBasic(v) {
				if d, ok := decodeBasic(v); ok && strings.Contains(d, placeholder) {
					return true
				}
			}
		}
	}
	return false
}

// names is the refused secret's name as a Record's Secrets (none: an unknown one).
func (r *refusal) names() []string {
	if r.secret == "" {
		return []string{""}
	}
	return []string{r.secret}
}

// asRefusal is err as a refusal; any other error is a 502.
func asRefusal(err error) *refusal {
	var r *refusal
	if errors.As(err, &r) {
		return r
	}
	return &refusal{http.StatusBadGateway, "egress: " + err.Error(), ""}
}
