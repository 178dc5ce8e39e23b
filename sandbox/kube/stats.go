package kube

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/cwsdev/cws/sandbox"
)

// summary is the part of the kubelet's summary API (/stats/summary) Stats reads.
type summary struct {
	Pods []struct {
		PodRef struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"podRef"`
		CPU *struct {
			UsageCoreNanoSeconds *uint64 `json:"usageCoreNanoSeconds"`
		} `json:"cpu"`
		Memory *struct {
			WorkingSetBytes *uint64 `json:"workingSetBytes"`
		} `json:"memory"`
		ProcessStats *struct {
			ProcessCount *uint64 `json:"process_count"`
		} `json:"process_stats"`
	} `json:"pods"`
}

// Stats asks each node that runs one of the pods for its kubelet's summary, through
// the API server's node proxy: one request per node, whatever the number of pods.
// Nodes it may not read (RBAC: nodes/proxy get) are left out.
func (d *Driver) Stats(ctx context.Context, ids []string) (map[string]sandbox.Stats, error) {
	want := map[string]bool{}
	nodes := map[string]bool{}
	for _, id := range ids {
		if p, err := d.pods.Get(id); err == nil && p.Spec.NodeName != "" {
			want[id] = true
			nodes[p.Spec.NodeName] = true
		}
	}
	out := map[string]sandbox.Stats{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for node := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw, err := d.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "stats", "summary").DoRaw(ctx)
			if err != nil {
				d.log.Debug("kubelet summary", "node", node, "err", err)
				return
			}
			var s summary
			if json.Unmarshal(raw, &s) != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, p := range s.Pods {
				if p.PodRef.Namespace != d.ns || !want[p.PodRef.Name] {
					continue
				}
				var st sandbox.Stats
				if p.CPU != nil && p.CPU.UsageCoreNanoSeconds != nil {
					st.CPUSeconds = float64(*p.CPU.UsageCoreNanoSeconds) / 1e9
				}
				if p.Memory != nil && p.Memory.WorkingSetBytes != nil {
					st.MemoryBytes = int64(*p.Memory.WorkingSetBytes)
				}
				if p.ProcessStats != nil && p.ProcessStats.ProcessCount != nil {
					st.Processes = int(*p.ProcessStats.ProcessCount)
				}
				out[p.PodRef.Name] = st
			}
		}()
	}
	wg.Wait()
	return out, ctx.Err()
}

var _ sandbox.StatsReader = (*Driver)(nil)
