package policy

import (
	"fmt"
	"slices"
)

// CheckRead reports whether the normalized path rel (see Normalize) may be read or
// listed: nil, or a *Violation wrapping ErrPolicy that names the rule. A rel that is
// not normalized is refused with ErrTraversal.
func (e *Effective) CheckRead(rel string) error {
	return fromGuard(rel, e.guard.Check(rel))
}

// CheckWrite reports whether size bytes may be written to rel: CheckRead, then the
// protected paths (FileName unless the tenant allows policy writes; ErrPolicy), then
// CheckSize. Call it before a byte is written.
func (e *Effective) CheckWrite(rel string, size int64) error {
	if err := fromGuard(rel, e.guard.CheckWrite(rel)); err != nil {
		return err
	}
	return e.CheckSize(rel, size)
}

// CheckSize reports whether a file of size bytes at rel is within maxFileSize (exactly
// the maximum is allowed). It refuses with ErrTooLarge, or ErrInvalid for a negative
// size. Use it for reads; CheckWrite calls it for writes.
func (e *Effective) CheckSize(rel string, size int64) error {
	switch {
	case size < 0:
		return &Violation{Err: ErrInvalid, Path: rel, Detail: fmt.Sprintf("negative size %d", size)}
	case size > e.maxFileSize:
		return &Violation{Err: ErrTooLarge, Rule: "maxFileSize", Path: rel,
			Detail: fmt.Sprintf("%d bytes exceeds maxFileSize %d", size, e.maxFileSize)}
	}
	return nil
}

// CheckEdit reports whether an edit of size bytes (the replacement text or patch) is
// within maxEditSize (exactly the maximum is allowed): ErrTooLarge otherwise.
func (e *Effective) CheckEdit(size int64) error {
	switch {
	case size < 0:
		return &Violation{Err: ErrInvalid, Detail: fmt.Sprintf("negative size %d", size)}
	case size > e.maxEditSize:
		return &Violation{Err: ErrTooLarge, Rule: "maxEditSize",
			Detail: fmt.Sprintf("%d bytes exceeds maxEditSize %d", size, e.maxEditSize)}
	}
	return nil
}

// NeedsConfirmation reports whether calls of tool need options.confirmed: true.
func (e *Effective) NeedsConfirmation(tool string) bool {
	return slices.Contains(e.confirm, tool)
}

// CheckConfirmed returns a *Violation wrapping ErrConfirm if tool needs confirmation
// and the call was not confirmed.
func (e *Effective) CheckConfirmed(tool string, confirmed bool) error {
	if confirmed || !e.NeedsConfirmation(tool) {
		return nil
	}
	return &Violation{Err: ErrConfirm, Rule: "confirmationRequired",
		Detail: fmt.Sprintf("tool %q is in confirmationRequired; call again with options.confirmed: true", tool)}
}
