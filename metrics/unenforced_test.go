package metrics_test

import (
	"testing"

	"github.com/cwsdev/cws/metrics"
)

func TestExecUnenforced(t *testing.T) {
	m, reg := newMetrics(t)
	if v, ok := series(t, reg, "cws_exec_unenforced_total", nil); !ok || v != 0 {
		t.Errorf("cws_exec_unenforced_total before = %v (exists %v), want 0", v, ok)
	}
	m.ExecUnenforced()
	m.ExecUnenforced()
	if v, ok := series(t, reg, "cws_exec_unenforced_total", nil); !ok || v != 2 {
		t.Errorf("cws_exec_unenforced_total = %v (exists %v), want 2", v, ok)
	}
	var nilM *metrics.Metrics
	nilM.ExecUnenforced()
}
