package policy

import (
	"fmt"
	"os"
	"slices"
)

// ByTenant holds each tenant's policy: the ceilings workspace.Service enforces (it
// implements workspace.Tenants).
type ByTenant map[string]*Policy

// Policy returns a tenant's policy.
func (b ByTenant) Policy(tenant string) (*Policy, bool) {
	p, ok := b[tenant]
	return p, ok
}

// TenantIDs lists the tenants, sorted (workspace.TenantLister).
func (b ByTenant) TenantIDs() []string {
	ids := make([]string, 0, len(b))
	for id := range b {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// LoadFiles reads each tenant's policy file (tenant id → path); an empty path means
// Default(). Errors name the tenant and the file.
func LoadFiles(files map[string]string) (ByTenant, error) {
	out := ByTenant{}
	for tenant, path := range files {
		if path == "" {
			out[tenant] = Default()
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", tenant, err)
		}
		p, err := Parse(data)
		if err != nil {
			return nil, fmt.Errorf("tenant %s: policy %s: %w", tenant, path, err)
		}
		out[tenant] = p
	}
	return out, nil
}
