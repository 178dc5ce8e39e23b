package core

import "fmt"

// cutNote says why an answer listing what (entries, files, matches) stopped early: at
// the caller's limit (the argument limitArg), or at the size one answer from the
// workspace may hold. "" when it is whole.
func cutNote(truncated bool, count, omitted int, what, limitArg string) string {
	if !truncated {
		return ""
	}
	more := "more were left out"
	if omitted > 0 {
		more = fmt.Sprintf("at least %d more were left out", omitted)
	}
	return fmt.Sprintf("truncated: %d %s shown and %s. An answer stops at %s or at about 1 MiB, whichever comes first: narrow it to see the rest.",
		count, what, more, limitArg)
}

// noteIf is note when cut, else "".
func noteIf(cut bool, note string) string {
	if !cut {
		return ""
	}
	return note
}
