package docker

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/docker/docker/api/types/container"

	"github.com/cwsdev/cws/sandbox"
)

// Stats reads each container's cgroup counters with a one-shot stats request (no
// sampling wait), eight at a time.
func (d *Driver) Stats(ctx context.Context, ids []string) (map[string]sandbox.Stats, error) {
	out := make(map[string]sandbox.Stats, len(ids))
	var mu sync.Mutex
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r, err := d.cli.ContainerStatsOneShot(ctx, id)
			if err != nil {
				return
			}
			defer r.Body.Close()
			var v container.StatsResponse
			if json.NewDecoder(r.Body).Decode(&v) != nil || v.Read.IsZero() {
				return // a stopped container answers zeros
			}
			st := sandbox.Stats{CPUSeconds: float64(v.CPUStats.CPUUsage.TotalUsage) / 1e9,
				MemoryBytes: int64(v.MemoryStats.Usage), MemoryPeakBytes: int64(v.MemoryStats.MaxUsage),
				Processes: int(v.PidsStats.Current)}
			mu.Lock()
			out[id] = st
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out, ctx.Err()
}

var _ sandbox.StatsReader = (*Driver)(nil)
