package workspace

import "context"

// FlushRenewals writes svc's pending renewals now.
func FlushRenewals(svc *Service) { svc.flushRenewals(context.Background()) }

// MapAgentError is mapAgentError, for the error-mapping tests.
var MapAgentError = mapAgentError

// AuditArgs is auditArgs, for the redaction tests.
var AuditArgs = auditArgs

// AheadPipe is the wake's read-ahead pipe, for its tests.
type AheadPipe = aheadPipe

// NewAheadPipe, CloseWrite and CloseRead export the pipe's constructor and ends.
var NewAheadPipe = newAheadPipe

func (p *aheadPipe) CloseWrite(err error) { p.closeWrite(err) }
func (p *aheadPipe) CloseRead(err error)  { p.closeRead(err) }
