package e2e_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/cwsdev/cws/internal/testenv"
)

// diffPolicy is the Coding Environment seed's example policy, with denied files that
// the repositories below also list in .gitignore.
const diffPolicy = `{
  "allowedPaths": ["**/*"],
  "deniedPaths": [".env", "secrets/**"],
  "maxSessions": 10
}`

// TestDiffE2E: under the seed's policy, GET /v1/sessions/{id}/diff answers for the
// repositories a user has (top-level files only, nested files only, both, no commit,
// empty), with the patch `git diff` gives by hand in the sandbox under the same policy.
func TestDiffE2E(t *testing.T) {
	requireRealDeps(t)
	fx := netFixture(t, diffPolicy)
	srv := startCWS(t, fx, testenv.Redis(t), freeAddr(t))
	t.Cleanup(func() { srv.deleteAll(t, fx, tenantOpen) })
	tok := fx.token(t, tenantOpen, "differ", "")
	const gitInit = `git init -q -b main && git config user.email t@x && git config user.name t && `
	const commit = ` && git add -A && git commit -qm base && `
	const secrets = ` && printf '.env\nsecrets/\n' > .gitignore && echo "` + leakSecret + `" > .env && mkdir -p secrets && echo "` + leakSecret + `" > secrets/token`
	for _, tc := range []struct {
		name, script string
		hasCommit    bool
	}{
		{"top-level files only", gitInit + `echo v1 > README.md && echo n > notes.txt && printf '.env\nsecrets/\n' > .gitignore` + commit +
			`echo v2 > README.md && rm notes.txt && echo new > new.txt` + secrets, true},
		{"nested files only", gitInit + `mkdir -p src/app docs && echo v1 > src/app/main.go && echo g > docs/guide.md` + commit +
			`echo v2 > src/app/main.go && rm docs/guide.md && mkdir -p src/new && echo x > src/new/x.go && mkdir -p secrets && echo "` + leakSecret + `" > secrets/token`, true},
		{"both", gitInit + `mkdir -p src && echo v1 > README.md && echo v1 > src/a.go` + commit + `echo v2 > README.md && echo v2 > src/a.go` + secrets, true},
		{"no commit", gitInit + `echo v1 > README.md` + secrets, false},
		{"empty repository", gitInit + `true`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, nil, srv.url, http.MethodPost, "/v1/sessions", tok, nil, nil)
			if r.status != http.StatusCreated {
				t.Fatalf("create: %d %s", r.status, r.body)
			}
			id := decode[sessionView](t, r).ID
			c := connect(t, srv.url+"/v1/sessions/"+id+"/mcp", tok, "")
			if res := c.call(t, "runCommand", map[string]any{"command": "sh", "args": []string{"-c", tc.script}}); res["exitCode"] != float64(0) {
				t.Fatalf("make the repository: %v", res)
			}
			base := "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
			if tc.hasCommit {
				base = "HEAD"
			}
			want := inContainer(t, containerOf(t, id), "sh", "-c", `export GIT_INDEX_FILE=$(mktemp -u) && git read-tree `+base+
				` && git add -A && git diff --cached --binary `+base+` -- ':(exclude).env' ':(exclude)secrets'; rm -f "$GIT_INDEX_FILE"`)
			d := do(t, nil, srv.url, http.MethodGet, "/v1/sessions/"+id+"/diff", tok, nil, nil)
			if d.status != http.StatusOK {
				t.Fatalf("diff: %d %s", d.status, d.body)
			}
			if string(d.body) != want {
				t.Errorf("diff:\n%s\nwant (git diff by hand):\n%s", d.body, want)
			}
			if strings.Contains(string(d.body), leakSecret) {
				t.Errorf("the diff shows a denied file:\n%s", d.body)
			}
			if tc.name != "empty repository" && !strings.Contains(string(d.body), "diff --git") {
				t.Errorf("the diff of a changed repository is empty")
			}
		})
	}
}
