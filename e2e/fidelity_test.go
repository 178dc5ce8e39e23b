package e2e_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/testenv"
)

// fidelityTree makes, in a session's workspace, every kind of entry a user's work holds
// (run as the workspace user): a Python virtualenv (venv/bin/python3 ->
// /usr/bin/python3), symlinks leading out, dangling and climbing, names that are not
// UTF-8 (two that differ in one Latin-1 byte), a newline in a name, a 255-byte name,
// modes (0400, 0700, 0755, a file and a directory the user can't read), an empty
// directory, a hard link, a 1 GiB sparse file, old mtimes, a FIFO, and a git
// repository with a commit.
const fidelityTree = `
import os, subprocess
os.chdir('/workspace')
subprocess.run(['python3', '-m', 'venv', '--without-pip', 'venv'], check=True)
os.symlink('/etc/passwd', 'abs-link')
os.symlink('../../../outside', 'climbing-link')
os.symlink('nowhere/at/all', 'dangling-link')
for b in (b'caf\xe9.txt', b'caf\xe8.txt'):
    open(b, 'wb').write(b)
open('new\nline', 'w').write('n')
open('x' * 255, 'w').write('long')
os.makedirs('deep/' + '/'.join('d%d' % i for i in range(30)))
open('ro.txt', 'w').write('read only')
os.chmod('ro.txt', 0o400)
os.makedirs('private/inner')
open('private/inner/f', 'w').write('p')
os.chmod('private', 0o700)
open('run.sh', 'w').write('#!/bin/sh\necho ran\n')
os.chmod('run.sh', 0o755)
open('locked.txt', 'w').write('nobody may read me')
os.chmod('locked.txt', 0o000)
os.makedirs('sealed')
open('sealed/inside', 'w').write('s')
os.chmod('sealed', 0o000)
os.makedirs('empty/dir')
open('a.txt', 'w').write('linked')
os.link('a.txt', 'hard.txt')
with open('sparse.img', 'wb') as f:
    f.seek(512 << 20); f.write(b'middle'); f.truncate(1 << 30)
os.mkfifo('pipe')
open('old.txt', 'w').write('old')
os.utime('old.txt', ns=(1_500_000_000_123_456_789, 1_500_000_000_123_456_789))
subprocess.run('git init -q && git -c user.email=a@b -c user.name=a add -A . ":!pipe" ":!sealed" ":!locked.txt" && git -c user.email=a@b -c user.name=a commit -qm one', shell=True, check=True)
`

// fidelityManifest prints every entry of the workspace, one line each: its name as
// bytes, type, mode, size, mtime in ns, link target, contents' hash, whether it is
// sparse and which earlier path it is a hard link of. It reads what the user can't by
// lifting and putting back the owner's bits (mtimes stay).
const fidelityManifest = `
import os, stat, hashlib
root = b'/workspace'
seen = {}
def walk(d):
    dmode = stat.S_IMODE(os.lstat(d).st_mode)
    lifted = (dmode & 0o500) != 0o500
    if lifted: os.chmod(d, dmode | 0o500)
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name); rel = os.path.relpath(p, root)
        st = os.lstat(p); m = st.st_mode
        kind = 'dir' if stat.S_ISDIR(m) else 'link' if stat.S_ISLNK(m) else 'file' if stat.S_ISREG(m) else 'other'
        target = os.readlink(p) if kind == 'link' else b''
        digest = sparse = hl = ''
        if kind == 'file':
            mode = stat.S_IMODE(m)
            if not mode & 0o400: os.chmod(p, mode | 0o400)
            h = hashlib.sha256(); f = open(p, 'rb')
            for chunk in iter(lambda: f.read(1 << 20), b''): h.update(chunk)
            f.close(); digest = h.hexdigest()[:16]
            if not mode & 0o400: os.chmod(p, mode)
            sparse = 'sparse' if st.st_blocks * 512 < st.st_size // 2 else 'dense'
            if st.st_nlink > 1: hl = repr(seen.setdefault(st.st_ino, rel))
        mtime = st.st_mtime_ns if kind != 'dir' else 'dir'
        print(repr(rel), kind, oct(stat.S_IMODE(m)) if kind != 'link' else '-', st.st_size if kind == 'file' else '-', mtime, repr(target), digest, sparse, hl)
        if kind == 'dir': walk(p)
    if lifted: os.chmod(d, dmode)
walk(root)
`

// TestFidelityE2E: a workspace comes back exactly as it was through a snapshot and a
// session made from it, a fork, and an idle archive and its wake: every entry alike
// (the FIFO skipped, and listed in the snapshot's record), the virtualenv's python
// still runs, and git status is clean.
func TestFidelityE2E(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	p := startCWSWith(t, fx, testenv.Redis(t), freeAddr(t),
		lifecycleArgs("file://"+t.TempDir(), "--suspend-after", "4s", "--archive-after", "2s", "--reap-every", "1s")...)
	t.Cleanup(func() { p.deleteAll(t, fx, tenantVSCode) })
	tok := fx.token(t, tenantVSCode, "fidelity", "")
	create := func(body any) string {
		t.Helper()
		r := p.post(t, tok, "/v1/sessions", body)
		if r.status != http.StatusCreated {
			t.Fatalf("create %v: %d %s", body, r.status, r.body)
		}
		return decode[lifeView](t, r).ID
	}
	run := func(id, script string) string {
		t.Helper()
		c := connect(t, p.url+"/v1/sessions/"+id+"/mcp", tok, "")
		res := c.call(t, "runCommand", map[string]any{"command": "python3", "args": []string{"-c", script}, "options": map[string]any{"timeout": 120}})
		if res["exitCode"] != 0.0 {
			t.Fatalf("python in %s: %v", id, res)
		}
		return fmt.Sprint(res["stdout"])
	}
	src := create(nil)
	run(src, fidelityTree)
	want := run(src, fidelityManifest)
	want = dropLine(want, "b'pipe' other") // skipped: must not come back
	if !strings.Contains(want, "b'venv/bin/python3' link - - ") || !strings.Contains(want, " sparse ") || !strings.Contains(want, "b'sealed' dir 0o0 ") {
		t.Fatalf("the tree was not made as meant:\n%s", want)
	}
	check := func(what, id string) {
		t.Helper()
		got := run(id, fidelityManifest)
		if got != want {
			t.Errorf("%s: the workspace came back different:\n%s", what, lineDiff(want, got))
		}
		if out := run(id, "import subprocess; print(subprocess.run(['/workspace/venv/bin/python3', '-c', 'print(6*7)'], capture_output=True, text=True).stdout, end='')"); out != "42\n" {
			t.Errorf("%s: the virtualenv's python answers %q", what, out)
		}
		if out := run(id, "import subprocess; print(subprocess.run('cd /workspace && git status --porcelain --untracked-files=no', shell=True, capture_output=True, text=True).stdout, end='')"); out != "" {
			t.Errorf("%s: git status is not clean:\n%s", what, out)
		}
	}

	// A snapshot, and a session made from it.
	r := p.post(t, tok, "/v1/sessions/"+src+"/snapshots", map[string]any{"name": "fidelity"})
	if r.status != http.StatusCreated {
		t.Fatalf("snapshot: %d %s", r.status, r.body)
	}
	snap := decode[struct {
		ID      string
		Skipped []struct{ Path, Why string }
	}](t, r)
	if len(snap.Skipped) != 1 || snap.Skipped[0].Path != "pipe" || !strings.Contains(snap.Skipped[0].Why, "FIFO") {
		t.Errorf("the snapshot's record lists skipped %+v, want the FIFO", snap.Skipped)
	}
	check("a session made from the snapshot", create(map[string]any{"snapshot": snap.ID}))

	// A fork.
	r = p.post(t, tok, "/v1/sessions/"+src+"/fork", map[string]any{"count": 1})
	if r.status != http.StatusCreated {
		t.Fatalf("fork: %d %s", r.status, r.body)
	}
	forks := decode[struct{ Sessions []lifeView }](t, r)
	if len(forks.Sessions) != 1 {
		t.Fatalf("fork: %s", r.body)
	}
	check("a fork", forks.Sessions[0].ID)

	// An idle archive, and its wake.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		g := decode[lifeView](t, do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+src, tok, nil, nil))
		if g.State == "archived" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session is %q after 2 min, want archived", g.State)
		}
	}
	if volumeExists(t, src) {
		// The reaper removes it right after the record: give it a moment.
		time.Sleep(2 * time.Second)
	}
	check("the archived session, woken", src)
	g := decode[map[string]any](t, do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+src, tok, nil, nil))
	if g["wakeError"] != nil {
		t.Errorf("the woken session shows a wake error: %v", g["wakeError"])
	}
}

func dropLine(s, prefix string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, prefix) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// lineDiff shows the lines only one side has.
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}
