package workspace

import "context"

// FlushRenewals writes svc's pending renewals now.
func FlushRenewals(svc *Service) { svc.flushRenewals(context.Background()) }

// MapAgentError is mapAgentError, for the error-mapping tests.
var MapAgentError = mapAgentError

// AuditArgs is auditArgs, for the redaction tests.
var AuditArgs = auditArgs
