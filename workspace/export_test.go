package workspace

import "context"

// FlushRenewals writes svc's pending renewals now.
func FlushRenewals(svc *Service) { svc.flushRenewals(context.Background()) }
