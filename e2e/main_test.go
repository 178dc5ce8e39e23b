package e2e_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cwsdev/cws/auth"
)

// The binaries TestMain builds, and why it could not.
var (
	cwsBinary   string
	agentBinary string
	buildErr    error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cws-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cwsBinary, agentBinary = filepath.Join(dir, "cws"), filepath.Join(dir, "cws-agent")
	start := time.Now()
	for _, b := range []struct{ out, pkg string }{
		{cwsBinary, "github.com/cwsdev/cws/cmd/cws"},
		{agentBinary, "github.com/cwsdev/cws/cmd/cws-agent"},
	} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", b.out, b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
			break
		}
	}
	if buildErr == nil {
		fmt.Fprintf(os.Stderr, "e2e: built cws and cws-agent in %s\n", time.Since(start).Round(time.Millisecond))
	}
	code := m.Run()
	if onKube() {
		_, _ = kubectl("delete", "ns", kubeNamespace, "--wait=false", "--ignore-not-found")
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireBinaries fails the test when TestMain could not build cws (a broken build is
// never a reason to skip).
func requireBinaries(t *testing.T) {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// Tenants of the fixture, suffixed with this run's id: tenant ids end up in container
// labels, and a cws reconciles the containers of the tenants it serves, so a run must
// not share tenant ids with another cws on the same engine (a `make run`, the compose
// stack, a concurrent run). churn has its own tenant so that its leftovers can be
// counted by label without counting anyone else's.
var (
	runID       = randomHex(3)
	tenantAcme  = "acme-" + runID
	tenantBeta  = "beta-" + runID
	tenantChurn = "churn-" + runID
	tenantEdge  = "edge-" + runID // EdDSA only: HS256 tokens "signed" with its public key must fail
	// vscode's tenant allows what its run configurations and terminal tests run, and the
	// wrappers whose hidden programs the terminal must refuse (touch is not allowed).
	tenantVSCode = "vsc-" + runID
	// open's policy has no command allowlist: its commands run without Landlock, so
	// what stops them is the identity alone (the agent's security tests).
	tenantOpen = "open-" + runID
	// term's policy allows the shell and what the terminal tests run in it, not id
	// (which a shell in a terminal must fail to start).
	tenantTerm = "term-" + runID
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// fixture is a tenants file with its policies and keys, written to a temp dir.
type fixture struct {
	path    string // tenants.yaml
	tenants *auth.Tenants
	secrets map[string][]byte // HS256 secret by tenant
	kids    map[string]string // kid by tenant
	edgePub []byte            // edge's public key, PEM
	edgeKey ed25519.PrivateKey
}

const acmePolicy = `{
  "allowedPaths": ["**"],
  "deniedPaths": [".env"],
  "allowedCommands": ["sh", "echo", "ls", "cat", "id", "sleep", "git"],
  "maxSessions": 10
}`

const vscodePolicy = `{
  "allowedPaths": ["**"],
  "deniedPaths": [".env", "secret/**"],
  "allowedCommands": ["sh", "echo", "ls", "cat", "sleep", "git", "env", "xargs", "find", "python3", "node", "go", "make", "npm"],
  "maxSessions": 10
}`

const openPolicy = `{
  "allowedPaths": ["**"],
  "maxSessions": 10
}`

const betaPolicy = `{
  "allowedPaths": ["**"],
  "allowedCommands": ["echo", "ls", "cat"],
  "maxSessions": 10
}`

const termPolicy = `{
  "allowedPaths": ["**"],
  "allowedCommands": ["bash", "sh", "stty", "python3", "sleep", "echo", "cat", "top", "head", "tr", "ls"],
  "maxSessions": 10
}`

const churnPolicy = `{
  "allowedPaths": ["**"],
  "allowedCommands": ["echo"],
  "maxSessions": 8
}`

func newFixture(t testing.TB) *fixture {
	t.Helper()
	dir := t.TempDir()
	fx := &fixture{path: filepath.Join(dir, "tenants.yaml"), secrets: map[string][]byte{}, kids: map[string]string{}}
	for _, id := range []string{tenantAcme, tenantBeta, tenantChurn, tenantVSCode, tenantOpen, tenantTerm} {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		fx.secrets[id] = []byte(hex.EncodeToString(b))
		fx.kids[id] = id + "-k1"
	}
	fx.kids[tenantEdge] = tenantEdge + "-k1"
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	fx.edgeKey, fx.edgePub = priv, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("acme.cws-policy.json", acmePolicy)
	write("beta.cws-policy.json", betaPolicy)
	write("churn.cws-policy.json", churnPolicy)
	write("vscode.cws-policy.json", vscodePolicy)
	write("open.cws-policy.json", openPolicy)
	write("term.cws-policy.json", termPolicy)
	write("edge.pub", string(fx.edgePub))
	write("tenants.yaml", fmt.Sprintf(`tenants:
  - id: %[1]s
    issuer: acme-platform
    keys:
      - {kid: %[2]s, alg: HS256, secret: %[3]q}
    policy: acme.cws-policy.json
  - id: %[4]s
    issuer: beta-platform
    audience: cws
    keys:
      - {kid: %[5]s, alg: HS256, secret: %[6]q}
    policy: beta.cws-policy.json
  - id: %[7]s
    issuer: churn-platform
    keys:
      - {kid: %[8]s, alg: HS256, secret: %[9]q}
    policy: churn.cws-policy.json
  - id: %[10]s
    issuer: edge-platform
    keys:
      - {kid: %[11]s, alg: EdDSA, publicKeyFile: edge.pub}
`, tenantAcme, fx.kids[tenantAcme], fx.secrets[tenantAcme], tenantBeta, fx.kids[tenantBeta], fx.secrets[tenantBeta],
		tenantChurn, fx.kids[tenantChurn], fx.secrets[tenantChurn], tenantEdge, fx.kids[tenantEdge])+
		fmt.Sprintf(`  - id: %[1]s
    issuer: vscode-platform
    keys:
      - {kid: %[2]s, alg: HS256, secret: %[3]q}
    policy: vscode.cws-policy.json
  - id: %[4]s
    issuer: open-platform
    keys:
      - {kid: %[5]s, alg: HS256, secret: %[6]q}
    policy: open.cws-policy.json
  - id: %[7]s
    issuer: term-platform
    keys:
      - {kid: %[8]s, alg: HS256, secret: %[9]q}
    policy: term.cws-policy.json
`, tenantVSCode, fx.kids[tenantVSCode], fx.secrets[tenantVSCode], tenantOpen, fx.kids[tenantOpen], fx.secrets[tenantOpen],
			tenantTerm, fx.kids[tenantTerm], fx.secrets[tenantTerm]))
	fx.tenants, err = auth.LoadTenants(fx.path)
	if err != nil {
		t.Fatalf("load the fixture's tenants: %v", err)
	}
	return fx
}

// token mints a one-hour token for sub of tenant, bound to session when it is not "".
func (fx *fixture) token(t testing.TB, tenant, sub, session string) string {
	t.Helper()
	tok, err := fx.tenants.Get(tenant).Mint(sub, time.Hour, session, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
