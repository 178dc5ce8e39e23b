package auth

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// tenantsFile is the YAML shape of the tenants file.
type tenantsFile struct {
	Tenants []tenantEntry `json:"tenants"`
}

type tenantEntry struct {
	ID       string     `json:"id"`
	Issuer   string     `json:"issuer"`
	Audience string     `json:"audience"`
	Keys     []keyEntry `json:"keys"`
	JWKSURL  string     `json:"jwksURL"`
	Policy   string     `json:"policy"`
	// DefaultScopes: nil (absent) means all scopes; [] means none.
	DefaultScopes *[]string `json:"defaultScopes"`
}

type keyEntry struct {
	KID           string `json:"kid"`
	Alg           string `json:"alg"`
	Secret        string `json:"secret"`
	SecretFile    string `json:"secretFile"`
	PublicKeyFile string `json:"publicKeyFile"`
}

// tenantIDPattern keeps ids safe in labels, store keys and "tenant:sub" user ids.
var tenantIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// LoadTenants reads and validates the tenants file at path. Relative paths in
// it (secretFile, publicKeyFile, policy) are resolved against the file's
// directory. Unknown fields are errors. All problems are reported at once,
// each prefixed with path and the tenant and key it concerns.
func LoadTenants(path string) (*Tenants, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tenants file: %w", err)
	}
	var f tenantsFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "error unmarshaling JSON: while decoding JSON: json: "))
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%s: resolve path: %w", path, err)
	}
	l := loader{path: path, dir: filepath.Dir(abs)}
	if len(f.Tenants) == 0 {
		l.failf("no tenants: list at least one under tenants:")
	}
	var list []*Tenant
	byID, byIss := map[string]bool{}, map[string]string{}
	for i, e := range f.Tenants {
		name := fmt.Sprintf("tenant #%d", i+1)
		if e.ID != "" {
			name = fmt.Sprintf("tenant %q", e.ID)
		}
		t := l.tenant(name, e)
		if e.ID != "" && byID[e.ID] {
			l.failf("%s: duplicate id (tenant ids must be unique)", name)
		}
		byID[e.ID] = true
		if other, ok := byIss[e.Issuer]; ok && e.Issuer != "" {
			l.failf("%s: issuer %q is also the issuer of tenant %q (issuers must be unique)", name, e.Issuer, other)
		}
		byIss[e.Issuer] = e.ID
		list = append(list, t)
	}
	l.checkSharedSecrets(list)
	if len(l.errs) > 0 {
		return nil, errors.Join(l.errs...)
	}
	return newTenants(list), nil
}

// loader collects validation errors of one tenants file.
type loader struct {
	path string // as given, for messages
	dir  string // absolute directory that relative paths start from
	errs []error
}

func (l *loader) failf(format string, args ...any) {
	l.errs = append(l.errs, fmt.Errorf("%s: "+format, append([]any{l.path}, args...)...))
}

func (l *loader) tenant(name string, e tenantEntry) *Tenant {
	t := &Tenant{ID: e.ID, Issuer: e.Issuer, Audience: e.Audience, JWKSURL: e.JWKSURL}
	switch {
	case e.ID == "":
		l.failf("%s: id is required", name)
	case !tenantIDPattern.MatchString(e.ID):
		l.failf("%s: id must be 1-63 characters of a-z, 0-9, '.', '_', '-', starting with a letter or digit", name)
	}
	if e.Issuer == "" {
		l.failf("%s: issuer is required (the iss claim of the tenant's tokens)", name)
	}
	if t.Audience == "" {
		t.Audience = DefaultAudience
	}
	if e.Policy != "" {
		if p, ok := l.file(name, "policy", e.Policy); ok {
			t.PolicyFile = p
		}
	}
	t.DefaultScopes = AllScopes()
	if e.DefaultScopes != nil {
		t.DefaultScopes = []string{}
		for _, sc := range *e.DefaultScopes {
			switch {
			case sc == ScopeAdmin:
				l.failf("%s: defaultScopes: %q is never a default: a token of the --admin-tenant tenant must carry it in its scope claim", name, sc)
			case sc == ScopeSecrets:
				l.failf("%s: defaultScopes: %q is never a default: a token must carry it in its scope claim", name, sc)
			case !KnownScope(sc):
				l.failf("%s: defaultScopes: unknown scope %q (known: %s)", name, sc, strings.Join(AllScopes(), ", "))
			case !slices.Contains(t.DefaultScopes, sc):
				t.DefaultScopes = append(t.DefaultScopes, sc)
			}
		}
	}
	if e.JWKSURL != "" {
		if err := checkJWKSURL(e.JWKSURL); err != nil {
			l.failf("%s: jwksURL: %v", name, err)
		}
	}
	if len(e.Keys) == 0 && e.JWKSURL == "" {
		l.failf("%s: no keys: add keys: or jwksURL:", name)
	}
	seen := map[string]bool{}
	for i, ke := range e.Keys {
		kname := fmt.Sprintf("%s: key #%d", name, i+1)
		if ke.KID != "" {
			kname = fmt.Sprintf("%s: key %q", name, ke.KID)
		}
		if ke.KID == "" {
			l.failf("%s: kid is required", kname)
		} else if seen[ke.KID] {
			l.failf("%s: duplicate kid within the tenant", kname)
		}
		seen[ke.KID] = true
		if k, ok := l.key(kname, ke); ok {
			k.Tenant = e.ID
			t.Keys = append(t.Keys, k)
		}
	}
	return t
}

// key loads one key's material and checks it matches its alg.
func (l *loader) key(name string, e keyEntry) (Key, bool) {
	k := Key{ID: e.KID, Alg: e.Alg}
	if e.Alg == "" {
		l.failf("%s: alg is required (one of %s)", name, strings.Join(Algs, ", "))
		return k, false
	}
	if !supportedAlg(e.Alg) {
		l.failf("%s: alg %q is not supported (use one of %s)", name, e.Alg, strings.Join(Algs, ", "))
		return k, false
	}
	if e.Alg == AlgHS256 {
		switch {
		case e.PublicKeyFile != "":
			l.failf("%s: HS256 keys take secret or secretFile, not publicKeyFile", name)
			return k, false
		case (e.Secret == "") == (e.SecretFile == ""):
			l.failf("%s: HS256 keys need exactly one of secret and secretFile", name)
			return k, false
		case e.Secret != "":
			k.Source, k.material = "secret", []byte(e.Secret)
		default:
			p, ok := l.file(name, "secretFile", e.SecretFile)
			if !ok {
				return k, false
			}
			data, err := os.ReadFile(p)
			if err != nil {
				l.failf("%s: secretFile %s: %v", name, e.SecretFile, err)
				return k, false
			}
			// One trailing newline is an editor's, not the secret's.
			data = bytes.TrimSuffix(bytes.TrimSuffix(data, []byte("\n")), []byte("\r"))
			k.Source, k.material = p, data
		}
	} else {
		if e.Secret != "" || e.SecretFile != "" {
			l.failf("%s: %s keys take publicKeyFile, not a secret", name, e.Alg)
			return k, false
		}
		if e.PublicKeyFile == "" {
			l.failf("%s: %s keys need publicKeyFile (a PEM public key)", name, e.Alg)
			return k, false
		}
		p, ok := l.file(name, "publicKeyFile", e.PublicKeyFile)
		if !ok {
			return k, false
		}
		data, err := os.ReadFile(p)
		if err == nil {
			k.material, err = parsePublicKeyPEM(data)
		}
		if err != nil {
			l.failf("%s: publicKeyFile %s: %v", name, e.PublicKeyFile, err)
			return k, false
		}
		k.Source = p
	}
	if err := checkMaterial(k.Alg, k.material); err != nil {
		l.failf("%s: %v", name, err)
		return k, false
	}
	return k, true
}

// file resolves a path from the tenants file and checks that it exists.
func (l *loader) file(name, field, p string) (string, bool) {
	abs := p
	if !filepath.IsAbs(p) {
		abs = filepath.Join(l.dir, p)
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		l.failf("%s: %s %s: no such file (paths are relative to the tenants file)", name, field, p)
		return "", false
	case err != nil:
		l.failf("%s: %s %s: %v", name, field, p, err)
		return "", false
	case st.IsDir():
		l.failf("%s: %s %s: is a directory, not a file", name, field, p)
		return "", false
	}
	return abs, true
}

// checkSharedSecrets refuses one HS256 secret in two tenants: either could
// then mint tokens for the other.
func (l *loader) checkSharedSecrets(list []*Tenant) {
	var seen []Key
	for _, t := range list {
		for _, k := range t.Keys {
			s, ok := k.material.([]byte)
			if !ok {
				continue
			}
			for _, o := range seen {
				if o.Tenant != k.Tenant && subtle.ConstantTimeCompare(o.material.([]byte), s) == 1 {
					l.failf("tenant %q: key %q: same secret as tenant %q key %q (every tenant needs its own secret)", k.Tenant, k.ID, o.Tenant, o.ID)
				}
			}
			seen = append(seen, k)
		}
	}
}

// checkJWKSURL wants https, or http to a loopback host (tests, sidecars).
func checkJWKSURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	switch u.Scheme {
	case "https":
	case "http":
		host := u.Hostname()
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("%s: must be https (http is allowed only for localhost)", raw)
		}
	default:
		return fmt.Errorf("%s: must be an https URL", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("%s: has no host", raw)
	}
	return nil
}
