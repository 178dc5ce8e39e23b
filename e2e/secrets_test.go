package e2e_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/internal/testenv"
)

// testCA is a CA made by the test, and a server certificate it signed for names.
func testCA(t *testing.T, names ...string) (caPEM []byte, leaf tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// authLog records the Authorization headers a test server received.
type authLog struct {
	mu   sync.Mutex
	seen []string
}

func (a *authLog) add(s string) {
	a.mu.Lock()
	a.seen = append(a.seen, s)
	a.mu.Unlock()
}

func (a *authLog) all() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.seen, "\n")
}

// serveTLS serves h over TLS with cert on 127.0.0.1 and returns its port.
func serveTLS(t *testing.T, h http.Handler, cert tls.Certificate) int {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

// privateGit is a bare repository served by git http-backend behind basic auth: the
// password must be *password (read per request, so a rotation shows), push allowed.
func privateGit(t *testing.T, cert tls.Certificate, password func() string, log *authLog) (port int, bare string) {
	t.Helper()
	root := t.TempDir()
	work := filepath.Join(root, "work")
	run := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	_ = os.MkdirAll(work, 0o755)
	run(work, "init", "-q", "-b", "main")
	_ = os.WriteFile(filepath.Join(work, "README.md"), []byte("private\n"), 0o644)
	run(work, "add", ".")
	run(work, "commit", "-qm", "first")
	run(root, "clone", "-q", "--bare", work, "repo.git")
	bare = filepath.Join(root, "repo.git")
	run(bare, "config", "http.receivepack", "true")
	backend, err := exec.LookPath("git-http-backend")
	if err != nil {
		backend = "/usr/lib/git-core/git-http-backend"
	}
	cg := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r.Header.Get("Authorization"))
		if _, p, ok := r.BasicAuth(); !ok || p != password() {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		cg.ServeHTTP(w, r)
	})
	return serveTLS(t, h, cert), bare
}

// TestSecretsE2E: a workspace holds only placeholders; through the egress proxy, a
// Bearer header (Python's urllib) and git over HTTPS behind basic auth (clone and push,
// with the credential helper cws sets) reach servers signed by a CA the test made —
// which cws trusts through SSL_CERT_FILE — with the real values; a rotation applies to
// the next request, of a running session and of a suspended one; a placeholder sent to another host is refused naming the secret;
// no value is found in the workspace's processes' environments, its files, the audit
// stream or cws's log; and cws restarted with another key refuses, saying why.
func TestSecretsE2E(t *testing.T) {
	requireRealDeps(t)
	fx := netFixture(t, `{"allowedPaths": ["**"], "maxSessions": 10, "network": true}`)
	caPEM, cert := testCA(t, "api.test", "git.test")
	bundle := filepath.Join(t.TempDir(), "roots.pem")
	roots, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err := os.WriteFile(bundle, append(roots, caPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	apiValue, gitValue := "api_VALUE_"+hex.EncodeToString(randBytes(8)), "git_VALUE_"+hex.EncodeToString(randBytes(8))
	current := func(v *string) func() string {
		return func() string { mu.Lock(); defer mu.Unlock(); return *v }
	}
	apiSeen, gitSeen := &authLog{}, &authLog{}
	apiPort := serveTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		apiSeen.add(r.Header.Get("Authorization"))
		fmt.Fprint(w, "api ok") // never echoes the header
	}), cert)
	gitPort, bare := privateGit(t, cert, current(&gitValue), gitSeen)
	plainPort := listenAny(t)
	key := hex.EncodeToString(randBytes(32))
	redisURL := testenv.Redis(t)
	p := startCWSEnv(t, fx, redisURL, freeAddr(t), []string{"SSL_CERT_FILE=" + bundle, "CWS_SECRETS_KEY=" + key},
		"--egress-resolve", "api.test=127.0.0.1", "--egress-resolve", "git.test=127.0.0.1", "--egress-resolve", "other.test=127.0.0.1",
		"--egress-allow-private", "127.0.0.1")
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			p.deleteAll(t, fx, tenantOpen)
		}
	})
	admin, err := fx.tenants.Get(tenantOpen).Mint("ops", time.Hour, "", append(auth.AllScopes(), auth.ScopeSecrets), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	putSecret := func(name, value, host string) {
		t.Helper()
		r := do(t, nil, p.url, http.MethodPut, "/v1/secrets/"+name, admin, []byte(`{"value": "`+value+`", "hosts": ["`+host+`"]}`), nil)
		if r.status != http.StatusCreated && r.status != http.StatusOK {
			t.Fatalf("put secret %s: %d %s", name, r.status, r.body)
		}
	}
	putSecret("api-token", apiValue, "api.test")
	putSecret("git-token", gitValue, "git.test")
	r := p.post(t, admin, "/v1/sessions", map[string]any{"secrets": map[string]string{"API_TOKEN": "api-token", "GIT_TOKEN": "git-token"}})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[lifeView](t, r).ID
	c := connect(t, p.url+"/v1/sessions/"+id+"/mcp", admin, "")
	run := func(cmd string, args ...string) map[string]any {
		t.Helper()
		return c.call(t, "runCommand", map[string]any{"command": cmd, "args": args, "options": map[string]any{"timeout": 120}})
	}
	fetch := `
import os, sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer " + os.environ["API_TOKEN"]})
try:
    r = urllib.request.urlopen(req, timeout=20); print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
except Exception as e:
    print(0, repr(e))
`
	apiURL := fmt.Sprintf("https://api.test:%d/user", apiPort)
	if env := run("sh", "-c", `echo "$API_TOKEN"`); !strings.HasPrefix(fmt.Sprint(env["stdout"]), "cws-secret-API_TOKEN-") {
		t.Fatalf("the workspace has no placeholder (%v): its agent predates secrets (on Kubernetes it comes from the cws image: make kube-images)", env)
	}

	if out := fmt.Sprint(run("python3", "-c", fetch, apiURL)["stdout"]); !strings.HasPrefix(out, "200 api ok") {
		t.Fatalf("urllib with the placeholder: %q", out)
	}
	if !strings.Contains(apiSeen.all(), "Bearer "+apiValue) {
		t.Errorf("the server got %q, want the value", apiSeen.all())
	}

	// Rotation: the next request carries the new value.
	newAPI := "api_ROTATED_" + hex.EncodeToString(randBytes(8))
	putSecret("api-token", newAPI, "api.test")
	if out := fmt.Sprint(run("python3", "-c", fetch, apiURL)["stdout"]); !strings.HasPrefix(out, "200") || !strings.Contains(apiSeen.all(), "Bearer "+newAPI) {
		t.Errorf("after a rotation: %q; the server got %q", out, apiSeen.all())
	}

	// Rotation while suspended: the woken session's next request carries the new value
	// (its placeholder, in its sandbox's environment, is the same).
	if r := p.post(t, admin, "/v1/sessions/"+id+"/suspend", nil); r.status != http.StatusOK {
		t.Fatalf("suspend: %d %s", r.status, r.body)
	}
	asleep := "api_ASLEEP_" + hex.EncodeToString(randBytes(8))
	putSecret("api-token", asleep, "api.test")
	if out := fmt.Sprint(run("python3", "-c", fetch, apiURL)["stdout"]); !strings.HasPrefix(out, "200") || !strings.Contains(apiSeen.all(), "Bearer "+asleep) {
		t.Errorf("after a rotation while suspended: %q; the server got %q", out, apiSeen.all())
	}

	// Another host: refused, naming the secret and the host.
	if out := fmt.Sprint(run("python3", "-c", fetch, fmt.Sprintf("http://other.test:%d/", plainPort))["stdout"]); !strings.HasPrefix(out, "403") ||
		!strings.Contains(out, "secret API_TOKEN (api-token) may not be sent to other.test") {
		t.Errorf("the placeholder to another host: %q", out)
	}

	// git over HTTPS behind basic auth, clone then push, with cws's credential helper.
	gitURL := fmt.Sprintf("https://git.test:%d/repo.git", gitPort)
	if cl := run("git", "clone", gitURL, "private"); fmt.Sprint(cl["exitCode"]) != "0" {
		t.Fatalf("git clone: %v", cl)
	}
	push := run("sh", "-c", `cd private && echo pushed > pushed.txt && git add pushed.txt && git -c user.name=a -c user.email=a@a commit -qm push && git push -q origin main 2>&1`)
	if fmt.Sprint(push["exitCode"]) != "0" {
		t.Errorf("git push: %v", push)
	} else if out, err := exec.Command("git", "-C", bare, "log", "--format=%s", "-1").Output(); err != nil || strings.TrimSpace(string(out)) != "push" {
		t.Errorf("the server's repository after the push: %q %v", out, err)
	}
	if !strings.Contains(gitSeen.all(), "Basic ") {
		t.Errorf("git sent no basic auth: %q", gitSeen.all())
	}

	// No value anywhere the workspace, the audit or the log can show.
	for _, v := range []string{apiValue, newAPI, asleep, gitValue} {
		grep := run("sh", "-c", `cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c "$0"; grep -rc "$0" . /tmp 2>/dev/null | grep -v ':0$' | wc -l`, v)
		if out := strings.Fields(fmt.Sprint(grep["stdout"])); len(out) != 2 || out[0] != "0" || out[1] != "0" {
			t.Errorf("value %s found in the workspace: %v", v[:8], grep)
		}
		if a := do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id+"/audit?limit=1000", admin, nil, nil); strings.Contains(string(a.body), v) {
			t.Errorf("value %s in the audit", v[:8])
		}
		if strings.Contains(p.logs.String(), v) {
			t.Errorf("value %s in cws's log", v[:8])
		}
	}
	env := run("sh", "-c", `echo "$API_TOKEN $SSL_CERT_FILE"`)
	if out := fmt.Sprint(env["stdout"]); !strings.HasPrefix(out, "cws-secret-API_TOKEN-") || !strings.Contains(out, "/tmp/.cws-ca-bundle.pem") {
		t.Errorf("the workspace's environment: %q", out)
	}
	a := do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id+"/audit?limit=1000", admin, nil, nil)
	if !strings.Contains(string(a.body), `"secrets":"api-token"`) || !strings.Contains(string(a.body), "may not be sent to other.test") {
		t.Errorf("the audit names neither the secret put in nor the refusal: %s", a.body)
	}

	// cws restarted with another key: it says why, and the session's requests to the
	// secret's host are refused with nothing sent.
	p.kill()
	p = startCWSEnv(t, fx, redisURL, freeAddr(t), []string{"SSL_CERT_FILE=" + bundle, "CWS_SECRETS_KEY=" + hex.EncodeToString(randBytes(32))},
		"--egress-resolve", "api.test=127.0.0.1", "--egress-allow-private", "127.0.0.1")
	restarted = true
	t.Cleanup(func() { p.deleteAll(t, fx, tenantOpen) }) // before this cws's own cleanup stops it
	if !strings.Contains(p.logs.String(), "does not open with this server's secrets key") {
		t.Errorf("cws with another key does not say why secrets fail:\n%s", p.logs.String())
	}
	c = connect(t, p.url+"/v1/sessions/"+id+"/mcp", admin, "")
	seen := apiSeen.all()
	if out := fmt.Sprint(run("python3", "-c", fetch, apiURL)["stdout"]); strings.HasPrefix(out, "200") || !strings.Contains(out, "503") {
		t.Errorf("with another key: %q, want the CONNECT refused (503)", out)
	}
	if apiSeen.all() != seen {
		t.Error("with another key, a request reached the secret's host")
	}
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
