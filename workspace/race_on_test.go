//go:build race

package workspace_test

// raceEnabled: the race detector slows the agent's regexp scan about 30-fold, so the
// huge-file search scales down to stay within its deadline.
const raceEnabled = true
