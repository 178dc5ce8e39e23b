// Package agent is the wire protocol between cws and the cws-agent that runs inside
// every sandbox, and the host-side Client that speaks it.
//
// # Transport
//
// The host reaches the agent through ONE long-lived byte stream per container (a
// `docker exec` of `cws-agent attach`, which bridges its stdio to the agent's socket).
// The stream opens with a handshake (one frame each way, carrying ProtocolVersion),
// then carries a yamux session: every call is its own yamux stream, so concurrent calls
// never block each other and a slow call never holds up a fast one.
//
// # Frames
//
// Everything on a call's stream is a frame:
//
//	uint32 header length | uint32 body length | header (JSON) | body (raw bytes)
//
// The client writes one request frame (header: op and args; body: payload such as a
// file's content or stdin), then may write a cancel frame. The server answers with any
// number of event frames (file data, stdout, stderr chunks) and ends with one done
// frame carrying the result or an error with a stable code. Large payloads therefore
// stream in chunks rather than being buffered into one JSON document.
//
// # Deadlines and liveness
//
// The host never waits on a silent agent. Every call has a deadline of its own (the
// timeout it carries plus a margin, or a default; a stream, how long it may move
// nothing), and a connection that brings nothing while a call waits is pinged: an agent
// that does not answer is declared unresponsive (ErrUnresponsive), its calls end, and
// the host is told (Liveness.OnUnresponsive) so that it can restart the agent.
package agent
