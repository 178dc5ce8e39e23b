package main

import (
	"net/http"
	"sync"
	"time"
)

// inFlight counts the requests being served (probes and metrics aside), so that
// shutdown can wait for calls to finish while the listener still answers /readyz with
// 503.
type inFlight struct {
	next http.Handler

	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while n > 0 has not been waited on
}

func (f *inFlight) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz", "/readyz", "/metrics":
		f.next.ServeHTTP(w, r)
		return
	}
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.n--
		if f.n == 0 && f.idle != nil {
			close(f.idle)
			f.idle = nil
		}
		f.mu.Unlock()
	}()
	f.next.ServeHTTP(w, r)
}

func (f *inFlight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// wait returns when no request is in flight, or at deadline.
func (f *inFlight) wait(deadline time.Time) {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	idle := f.idle
	f.mu.Unlock()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}
