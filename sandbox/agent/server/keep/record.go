package keep

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent"
)

// lostError says that what was asked for went with the keeper that held it.
func (p *proc) lostError(what string) error {
	state := "it may still run, but nothing reads its output any more"
	if p.ended != nil && p.code != nil {
		state = "it had exited with code " + strconv.Itoa(*p.code)
	}
	return agent.Errorf(agent.CodeLost, "", "background process %s (%s) was lost with the agent: the agent's process keeper ended, and %s went with it; %s. Start it again if you need it",
		p.id, p.argv[0], what, state)
}

// Records: <dir>/<id>.json, the process's agent.ProcInfo, written when it is adopted
// and again when it ends.

const recordExt = ".json"

func (k *Keeper) save(rec agent.ProcInfo) {
	if k.dir == "" {
		return
	}
	b, err := json.Marshal(rec)
	if err == nil {
		tmp := filepath.Join(k.dir, "."+rec.ID+recordExt)
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, filepath.Join(k.dir, rec.ID+recordExt))
		}
	}
	if err != nil {
		k.log.Warn("background process record not written", "id", rec.ID, "err", err)
	}
}

// loadRecords reads every record in dir; unreadable ones are skipped.
func loadRecords(dir string) ([]agent.ProcInfo, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []agent.ProcInfo
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, recordExt) || strings.HasPrefix(name, ".") || !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		var pi agent.ProcInfo
		if err != nil || json.Unmarshal(b, &pi) != nil || idNumber(pi.ID) == 0 || pi.ID+recordExt != name {
			continue
		}
		out = append(out, pi)
	}
	return out, nil
}

// lostProc is the process of a record whose keeper ended.
func lostProc(r agent.ProcInfo) *proc {
	p := &proc{id: r.ID, argv: r.Argv, pid: r.PID, started: r.StartedAt, unenforced: r.Unenforced, lost: true, changed: make(chan struct{})}
	if r.ExitCode != nil && r.EndedAt != nil {
		code, end := *r.ExitCode, *r.EndedAt
		p.code, p.ended = &code, &end
	}
	return p
}
