package kube

import (
	"io"
	"net"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// Agent streams end with their pod. A pod deleted behind cws's back may run on for
// its grace period (a forced delete only removes the object), and a stream to it
// would keep answering for a session that is gone. So the driver tracks its streams
// by pod, and the informer closes them when the pod is being deleted, gone, or made
// again (a new UID): the next call reconnects and finds out (sandbox.ErrNotFound is a
// lost session, as a removed container is on Docker).

type connSet struct {
	mu    sync.Mutex
	byPod map[string]map[io.Closer]string // pod name → stream → the pod's UID
}

// track registers c as a stream to pod p and returns it wrapped, so that its Close
// unregisters it.
func (s *connSet) track(p *corev1.Pod, c io.ReadWriteCloser) io.ReadWriteCloser {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byPod == nil {
		s.byPod = map[string]map[io.Closer]string{}
	}
	if s.byPod[p.Name] == nil {
		s.byPod[p.Name] = map[io.Closer]string{}
	}
	tc := &trackedConn{ReadWriteCloser: c, set: s, pod: p.Name}
	if nc, ok := c.(net.Conn); ok {
		tc.conn = nc
	}
	s.byPod[p.Name][tc] = string(p.UID)
	return tc
}

// closeAll closes the streams of pod name, or those of another UID than keep.
func (s *connSet) closeAll(name, keep string) {
	s.mu.Lock()
	var doomed []io.Closer
	for c, uid := range s.byPod[name] {
		if keep == "" || uid != keep {
			doomed = append(doomed, c)
		}
	}
	s.mu.Unlock()
	for _, c := range doomed {
		c.Close()
	}
}

// podChanged is the informer's word on pod p (nil: gone).
func (s *connSet) podChanged(name string, p *corev1.Pod) {
	switch {
	case p == nil || p.DeletionTimestamp != nil:
		s.closeAll(name, "")
	default:
		if _, stopped := podState(p); stopped {
			s.closeAll(name, "")
		} else {
			s.closeAll(name, string(p.UID))
		}
	}
}

type trackedConn struct {
	io.ReadWriteCloser
	conn net.Conn // the direct path's TCP connection, or nil
	set  *connSet
	pod  string
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.byPod[c.pod], c)
		if len(c.set.byPod[c.pod]) == 0 {
			delete(c.set.byPod, c.pod)
		}
		c.set.mu.Unlock()
		c.ReadWriteCloser.Close()
	})
	return nil
}
