package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// ProtocolVersion is bumped on any incompatible change to frames, ops or results.
// The host refuses an agent that speaks another version. 2: ExecArgs.Launch (an agent
// that ignored it would run restricted commands unenforced).
const ProtocolVersion = 2

// Frame size limits. A frame over them is a protocol error, never an allocation.
const (
	MaxHeader = 1 << 20 // bytes of JSON header
	MaxBody   = 8 << 20 // bytes of body in one frame
	ChunkSize = 256 << 10
)

// RuleFrameSize is the Rule of a CodeTooLarge error about a request or an answer that
// cannot travel in one frame.
const RuleFrameSize = "frameSize"

// FrameTooLarge is the error for a frame over MaxHeader or MaxBody: a CodeTooLarge
// WireError that names the limits. It is never a broken stream: the same frame would
// never fit, so nothing may retry it.
func FrameTooLarge(header, body int) *WireError {
	return frameTooLarge(header, body, MaxHeader, MaxBody)
}

func frameTooLarge(header, body, maxHeader, maxBody int) *WireError {
	return &WireError{Code: CodeTooLarge, Rule: RuleFrameSize, Message: fmt.Sprintf(
		"frame too large: header %d bytes, body %d bytes; one frame of the agent protocol holds at most %d bytes of header and %d bytes of body",
		header, body, maxHeader, maxBody)}
}

// Header is a frame's JSON header. Which fields are set depends on the frame's role.
type Header struct {
	// Request frames.
	Op   string          `json:"op,omitempty"`
	Args json.RawMessage `json:"args,omitempty"`

	// Stream marks a request whose body follows in data events, ended by an eof event.
	Stream bool `json:"stream,omitempty"`

	// ID names a request that changes the workspace (write, remove, rename, mkdir, …).
	// The agent remembers the outcomes of recent ids and answers a repeated id with the
	// first outcome instead of applying it again, so the host may retry it on a fresh
	// stream after the old one broke. Empty: no deduplication.
	ID string `json:"id,omitempty"`

	// Cancel frame (client → server).
	Cancel bool `json:"cancel,omitempty"`

	// Event frames: "data", "stdout", "stderr", "started" (server → client); "data", "eof"
	// (client → server). "started" tells the host a command was accepted and is about to
	// run, so a broken stream can say whether it started.
	Event string `json:"ev,omitempty"`

	// Done frame (server → client).
	Done   bool            `json:"done,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *WireError      `json:"error,omitempty"`
}

// Hello is the handshake each side sends first.
type Hello struct {
	Protocol int    `json:"protocol"`
	Version  string `json:"version"` // the sender's release (version.Version)
	Error    string `json:"error,omitempty"`

	// Root, from a host on a unix socket: send the workspace root's descriptor with the
	// answer, as SCM_RIGHTS (see local.go). An agent that does not know it ignores it.
	Root bool `json:"root,omitempty"`

	// Egress, from a host: it takes the agent's egress streams (OpEgress, netedge.go).
	Egress bool `json:"egress,omitempty"`

	// EgressConns, from a host on a unix socket that takes egress streams: send it
	// the descriptors of egress connections (egressconn.go). An agent that does not know
	// it ignores it.
	EgressConns bool `json:"egressConns,omitempty"`
}

// WriteHelloRights writes the handshake frame with a descriptor attached.
func WriteHelloRights(c *net.UnixConn, h Hello, fd int) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	buf, err := appendRaw(nil, b, nil)
	if err != nil {
		return err
	}
	n, _, err := c.WriteMsgUnix(buf, unix.UnixRights(fd), nil)
	if err == nil && n < len(buf) {
		_, err = c.Write(buf[n:])
	}
	return err
}

// WriteFrame writes one frame. It is not safe for concurrent use on one writer.
func WriteFrame(w io.Writer, h *Header, body []byte) error {
	hb, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode frame header: %w", err)
	}
	return writeRaw(w, hb, body)
}

// AppendFrame appends one encoded frame to buf, for a writer that sends several frames
// in one write.
func AppendFrame(buf []byte, h *Header, body []byte) ([]byte, error) {
	hb, err := json.Marshal(h)
	if err != nil {
		return buf, fmt.Errorf("encode frame header: %w", err)
	}
	return appendRaw(buf, hb, body)
}

func writeRaw(w io.Writer, header, body []byte) error {
	buf, err := appendRaw(make([]byte, 0, 8+len(header)+len(body)), header, body)
	if err != nil {
		return err
	}
	_, err = w.Write(buf)
	return err
}

func appendRaw(buf, header, body []byte) ([]byte, error) {
	if len(header) > MaxHeader || len(body) > MaxBody {
		return buf, FrameTooLarge(len(header), len(body))
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(header)))
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(body)))
	buf = append(buf, header...)
	return append(buf, body...), nil
}

// ReadFrame reads one frame. io.EOF means the peer closed cleanly between frames.
func ReadFrame(r io.Reader) (*Header, []byte, error) {
	hb, body, err := readRaw(r)
	if err != nil {
		return nil, nil, err
	}
	var h Header
	if err := json.Unmarshal(hb, &h); err != nil {
		return nil, nil, fmt.Errorf("decode frame header: %w", err)
	}
	return &h, body, nil
}

func readRaw(r io.Reader) (header, body []byte, err error) {
	return readRawMax(r, MaxHeader, MaxBody)
}

// readRawMax reads one frame whose header and body are at most maxHeader and maxBody
// bytes; a larger one is refused before anything is allocated.
func readRawMax(r io.Reader, maxHeader, maxBody uint32) (header, body []byte, err error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return nil, nil, err
	}
	hl := binary.BigEndian.Uint32(pre[0:4])
	bl := binary.BigEndian.Uint32(pre[4:8])
	if hl > maxHeader || bl > maxBody {
		return nil, nil, frameTooLarge(int(hl), int(bl), int(maxHeader), int(maxBody))
	}
	buf := make([]byte, int(hl)+int(bl))
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, nil, err
	}
	return buf[:hl], buf[hl:], nil
}

// WriteHello and ReadHello carry the handshake, framed like everything else.
func WriteHello(w io.Writer, h Hello) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return writeRaw(w, b, nil)
}

// ReadHello reads the peer's handshake frame.
func ReadHello(r io.Reader) (Hello, error) {
	var h Hello
	hb, _, err := readRaw(r)
	if err != nil {
		return h, err
	}
	if err := json.Unmarshal(hb, &h); err != nil {
		return h, fmt.Errorf("decode handshake: %w", err)
	}
	return h, nil
}
