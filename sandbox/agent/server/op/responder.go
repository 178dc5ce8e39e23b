package op

import (
	"io"
	"sync"

	"github.com/cwsdev/cws/sandbox/agent"
)

// Responder serialises the frames one call sends back, and holds a streamed request body.
type Responder struct {
	mu sync.Mutex
	w  io.Writer
	In io.Reader // the request body of a streamed call; nil otherwise
	// held are encoded event frames that go out with the next frame (see Hold).
	held []byte
}

// NewResponder returns a Responder that writes its frames to w.
func NewResponder(w io.Writer) *Responder { return &Responder{w: w} }

// holdMax bounds the event frames a responder holds back.
const holdMax = 64 << 10

// Send writes one frame, after any held ones, in one write.
func (r *Responder) Send(h *agent.Header, body []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.held) == 0 {
		return agent.WriteFrame(r.w, h, body)
	}
	buf, err := agent.AppendFrame(r.held, h, body)
	r.held = nil
	if err != nil {
		return err
	}
	_, err = r.w.Write(buf)
	return err
}

// Hold sends event frames that are not live output (a file's content) with the frame
// after them: a small reply, its data and its done frame, is one write on the stream
// and one frame on the connection. Held frames never exceed holdMax.
func (r *Responder) Hold(ev string, data []byte) error {
	if len(data) > holdMax {
		return r.Event(ev, data)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.held)+len(data) > holdMax {
		if _, err := r.w.Write(r.held); err != nil {
			return err
		}
		r.held = r.held[:0]
	}
	var err error
	r.held, err = agent.AppendFrame(r.held, &agent.Header{Event: ev}, data)
	return err
}

// Holding reports whether event frames are held back, not yet written.
func (r *Responder) Holding() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held) > 0
}

// Event sends one event frame, splitting data into chunks the frame limit allows.
func (r *Responder) Event(ev string, data []byte) error {
	for len(data) > 0 {
		n := min(len(data), agent.ChunkSize)
		if err := r.Send(&agent.Header{Event: ev}, data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}
