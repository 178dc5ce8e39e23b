package workspace

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/egress"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/secrets"
	"github.com/cwsdev/cws/workspace/policy"
)

// A tenant's secrets are written once and never read back: the store keeps each value
// sealed (Config.SecretsKey), a session asks for some at create and its workspace sees
// only a placeholder per secret, and the egress proxy puts the value in where the
// placeholder goes to one of the secret's hosts (package egress). A new value applies
// to the next request of every session: the proxy reads the secret each time.

// SecretInput is what a caller writes: the value and the hosts it may go to.
type SecretInput struct {
	Value string   `json:"value"`
	Hosts []string `json:"hosts"`
}

// SecretInfo is a secret as anyone sees it: never its value.
type SecretInfo struct {
	Name      string    `json:"name"`
	Hosts     []string  `json:"hosts"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

func secretInfo(r *SecretRecord) SecretInfo {
	return SecretInfo{Name: r.Name, Hosts: slices.Clone(r.Hosts), CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// maxSecretHosts bounds a secret's host list; maxSessionSecrets a session's secrets.
const (
	maxSecretHosts    = 64
	maxSessionSecrets = 32
)

// secretsReady fails unless the server has a key.
func (s *Service) secretsReady() error {
	if s.cfg.SecretsKey == nil {
		return fmt.Errorf("%w: %s", ErrNotConfigured, secrets.HowToSetKey)
	}
	return nil
}

// sealContext binds a sealed value to its tenant and name.
func sealContext(tenant, name string) string { return tenant + "/" + name }

// PutSecret writes caller's secret name (scope secrets): a new one, or a new value and
// hosts for one that exists (created reports which).
func (s *Service) PutSecret(ctx context.Context, caller Caller, name string, in SecretInput) (info SecretInfo, created bool, err error) {
	if err := s.secretsReady(); err != nil {
		return SecretInfo{}, false, err
	}
	if err := caller.need(auth.ScopeSecrets, "writing a secret"); err != nil {
		return SecretInfo{}, false, err
	}
	if !secrets.ValidName(name) {
		return SecretInfo{}, false, invalidf("name", "secret name %q must match %s", name, secrets.NameRule)
	}
	switch {
	case in.Value == "":
		return SecretInfo{}, false, invalidf("value", "value is empty")
	case len(in.Value) > secrets.MaxValueBytes:
		return SecretInfo{}, false, invalidf("value", "value is %d bytes, more than %d", len(in.Value), secrets.MaxValueBytes)
	case strings.ContainsAny(in.Value, "\r\n\x00"):
		return SecretInfo{}, false, invalidf("value", "value holds a CR, LF or NUL byte: it goes into HTTP headers")
	}
	if err := checkSecretHosts(in.Hosts); err != nil {
		return SecretInfo{}, false, err
	}
	now := s.cfg.Now().UTC()
	rec := &SecretRecord{Name: name, Hosts: slices.Clone(in.Hosts), CreatedAt: now, UpdatedAt: now,
		Sealed: s.cfg.SecretsKey.Seal([]byte(in.Value), sealContext(caller.Tenant, name))}
	old, err := s.cfg.Store.GetSecret(ctx, caller.Tenant, name)
	switch {
	case err == nil:
		rec.CreatedAt = old.CreatedAt
	case !errors.Is(err, ErrNotFound):
		return SecretInfo{}, false, err
	}
	if err := s.cfg.Store.PutSecret(ctx, caller.Tenant, rec); err != nil {
		return SecretInfo{}, false, err
	}
	s.record(AuditRecord{Time: now, Tenant: caller.Tenant, Subject: caller.Subject, Tool: "secret.put", Decision: "allow",
		Outcome: "ok", Secrets: name, Target: strings.Join(rec.Hosts, ",")})
	return secretInfo(rec), old == nil, nil
}

// checkSecretHosts: at least one; each a name, *.name or an IP, with an optional port,
// as the egress rules write them (no preset, no CIDR, nothing wider than they allow),
// and no wildcard over a whole top-level domain (*.com).
func checkSecretHosts(hosts []string) error {
	if len(hosts) == 0 {
		return invalidf("hosts", "hosts is empty: name where the secret may be sent (github.com, *.example.org, api.example.com:8443)")
	}
	if len(hosts) > maxSecretHosts {
		return invalidf("hosts", "more than %d hosts", maxSecretHosts)
	}
	for i, h := range hosts {
		if strings.HasPrefix(h, "@") || strings.Contains(h, "/") {
			return invalidf("hosts", "hosts[%d] %q: a secret's host is a name, *.name or an IP, with an optional port (no preset, no CIDR)", i, h)
		}
		if _, err := egress.ParseRules([]string{h}, nil); err != nil {
			return invalidf("hosts", "hosts[%d]: %v", i, err)
		}
		if base, ok := strings.CutPrefix(h, "*."); ok && !strings.Contains(strings.Trim(strings.Split(base, ":")[0], "."), ".") {
			return invalidf("hosts", "hosts[%d] %q: a wildcard that wide would send the secret to a whole top-level domain; name at least two labels (*.example.com)", i, h)
		}
	}
	return nil
}

// ListSecrets lists caller's secrets, names, hosts and dates only (scope secrets).
func (s *Service) ListSecrets(ctx context.Context, caller Caller) ([]SecretInfo, error) {
	if err := s.secretsReady(); err != nil {
		return nil, err
	}
	if err := caller.need(auth.ScopeSecrets, "listing secrets"); err != nil {
		return nil, err
	}
	recs, err := s.cfg.Store.ListSecrets(ctx, caller.Tenant)
	if err != nil {
		return nil, err
	}
	out := make([]SecretInfo, 0, len(recs))
	for _, r := range recs {
		out = append(out, secretInfo(r))
	}
	return out, nil
}

// DeleteSecret deletes caller's secret name (scope secrets). A session that uses it
// has its requests with the placeholder refused from then on.
func (s *Service) DeleteSecret(ctx context.Context, caller Caller, name string) error {
	if err := s.secretsReady(); err != nil {
		return err
	}
	if err := caller.need(auth.ScopeSecrets, "deleting a secret"); err != nil {
		return err
	}
	if err := s.cfg.Store.DeleteSecret(ctx, caller.Tenant, name); err != nil {
		return err
	}
	s.record(AuditRecord{Time: s.cfg.Now().UTC(), Tenant: caller.Tenant, Subject: caller.Subject, Tool: "secret.delete",
		Decision: "allow", Outcome: "ok", Secrets: name})
	return nil
}

// sessionSecrets checks what a create asks for (variable → secret name) and gives each
// a fresh placeholder. An unknown secret (another tenant's included) is ErrInvalid, one
// the tenant's policy does not list ErrPolicy, both naming it.
func (s *Service) sessionSecrets(ctx context.Context, tenant string, tp *policy.Policy, want, env map[string]string) ([]SessionSecret, error) {
	if len(want) == 0 {
		return nil, nil
	}
	if err := s.secretsReady(); err != nil {
		return nil, err
	}
	if s.cfg.Egress == nil || s.cfg.Egress.CA == nil {
		return nil, fmt.Errorf("%w: the egress CA that secrets need is not loaded (see cws's log)", ErrUnavailable)
	}
	if tp.DirectNetwork() {
		return nil, &policy.Violation{Err: ErrPolicy, Rule: "network",
			Detail: `the tenant's network is "direct": its sandboxes bypass the egress proxy, which is what puts secrets in`}
	}
	if len(want) > maxSessionSecrets {
		return nil, invalidf("secrets", "at most %d secrets", maxSessionSecrets)
	}
	var out []SessionSecret
	for _, v := range slices.Sorted(maps.Keys(want)) {
		name := want[v]
		switch {
		case !secrets.ValidEnv(v):
			return nil, invalidf("secrets", "variable %q must match %s", v, secrets.EnvRule)
		case env[v] != "":
			return nil, invalidf("secrets", "variable %s is in both env and secrets", v)
		case !secrets.ValidName(name):
			return nil, invalidf("secrets", "secret name %q must match %s", name, secrets.NameRule)
		}
		if _, err := s.cfg.Store.GetSecret(ctx, tenant, name); err != nil {
			if errors.Is(err, ErrNotFound) {
				return nil, invalidf("secrets", "unknown secret %q", name)
			}
			return nil, err
		}
		if tp.Secrets != nil && !slices.Contains(tp.Secrets, name) {
			return nil, &policy.Violation{Err: ErrPolicy, Rule: "secrets", Detail: fmt.Sprintf("secret %q is not in the policy's secrets", name)}
		}
		out = append(out, SessionSecret{Env: v, Name: name, Placeholder: secrets.NewPlaceholder(v)})
	}
	return out, nil
}

// secretEnv is what a session with secrets adds to its sandbox's environment (the agent
// reads both, see agent.EnvEgressCA): the CA, and for every command each placeholder
// and a git credential helper that answers with it for the secret's hosts.
func (s *Service) secretEnv(ctx context.Context, sess *Session) map[string]string {
	if len(sess.Secrets) == 0 || s.cfg.Egress == nil || s.cfg.Egress.CA == nil {
		return nil
	}
	vars := map[string]string{}
	n := 0
	for _, sec := range sess.Secrets {
		vars[sec.Env] = sec.Placeholder
		rec, err := s.cfg.Store.GetSecret(ctx, sess.Tenant, sec.Name)
		if err != nil {
			continue // deleted: no helper; its placeholder is refused anyway
		}
		if helper := gitHelper(sec.Env, rec.Hosts); helper != "" {
			vars["GIT_CONFIG_KEY_"+strconv.Itoa(n)] = "credential.helper"
			vars["GIT_CONFIG_VALUE_"+strconv.Itoa(n)] = helper
			n++
		}
	}
	if n > 0 {
		vars["GIT_CONFIG_COUNT"] = strconv.Itoa(n)
	}
	b, _ := json.Marshal(vars)
	return map[string]string{agent.EnvEgressCA: string(s.cfg.Egress.CA.CertPEM()), agent.EnvEgressVars: string(b)}
}

// gitHelper is a git credential helper that answers x-access-token and the
// placeholder in $env when git asks for one of hosts (port aside; "*.name" any depth
// below, as the egress rules match), and nothing otherwise, so that git tries the
// next. Hosts are egress entries (checked when written): names, wildcards and IPv4
// addresses are safe in a shell case pattern; IPv6 ones are left out.
func gitHelper(env string, hosts []string) string {
	var pats []string
	for _, h := range hosts {
		if strings.HasPrefix(h, "[") {
			continue
		}
		h, _, _ = strings.Cut(h, ":")
		pats = append(pats, strings.ToLower(h))
	}
	if len(pats) == 0 {
		return ""
	}
	return `!f() { test "$1" = get || exit 0; h=; while IFS='=' read -r k v; do test "$k" = host && h="$v"; done; ` +
		`case "${h%:*}" in ` + strings.Join(pats, "|") + `) printf 'username=x-access-token\npassword=%s\n' "$` + env + `";; esac; }; f`
}

// egressSecrets are a session's secrets as the proxy applies them, read from the store
// for each request so that a new value, or a deletion, applies at once.
func (s *Service) egressSecrets(ctx context.Context, tenant, id string) ([]egress.Secret, error) {
	sess, ok := s.sessions.get(tenant, id)
	if !ok {
		var err error
		if sess, err = s.cfg.Store.GetSession(ctx, tenant, id); err != nil {
			return nil, err
		}
	}
	if len(sess.Secrets) == 0 {
		return nil, nil
	}
	key := s.cfg.SecretsKey
	out := make([]egress.Secret, 0, len(sess.Secrets))
	for _, sec := range sess.Secrets {
		es := egress.Secret{Env: sec.Env, Name: sec.Name, Placeholder: sec.Placeholder}
		rec, err := s.cfg.Store.GetSecret(ctx, tenant, sec.Name)
		switch {
		case errors.Is(err, ErrNotFound):
			es.Value = func(context.Context) (string, error) { return "", errors.New("it was deleted") }
		case err != nil:
			return nil, err
		default:
			es.Hosts, _ = egress.ParseRules(rec.Hosts, nil) // checked when written
			sealed, sc := rec.Sealed, sealContext(tenant, sec.Name)
			es.Value = func(context.Context) (string, error) {
				if key == nil {
					return "", errors.New(secrets.HowToSetKey)
				}
				v, err := key.Open(sealed, sc)
				return string(v), err
			}
		}
		out = append(out, es)
	}
	return out, nil
}

// caClaim is the store key of the deployment's egress CA, sealed.
const caClaim = "secrets:egress-ca"

// LoadSecretsCA returns the deployment's egress CA: the one the store holds, opened
// with key, or a new one it records for every replica. A CA sealed with another key
// is an error saying so (secrets then fail closed).
func LoadSecretsCA(ctx context.Context, store Store, key *secrets.Key, now time.Time) (*egress.CA, error) {
	ca, bundle, err := egress.NewCA(now)
	if err != nil {
		return nil, err
	}
	sealed := base64.StdEncoding.EncodeToString(key.Seal(bundle, caClaim))
	cur, claimed, err := store.Claim(ctx, caClaim, sealed, 0)
	if err != nil {
		return nil, fmt.Errorf("load the egress CA: %w", err)
	}
	if claimed {
		return ca, nil
	}
	raw, err := base64.StdEncoding.DecodeString(cur)
	if err != nil {
		return nil, fmt.Errorf("the egress CA in the store can't be read: %v", err)
	}
	b, err := key.Open(raw, caClaim)
	if err != nil {
		return nil, fmt.Errorf("the egress CA in the store: %w", err)
	}
	return egress.ParseCA(b)
}
