package agent

// The TCP path: where the host shares no file system with the sandbox (a Kubernetes
// pod), the agent also listens on TCP, and the host reaches it at the pod's IP. Every
// connection proves the container's secret first (AuthenticateAgent on the host's
// side, server.ServeSecret on the agent's), exactly as on the socket path; the wire
// protocol after it is the same.
const (
	// EnvListen, in the agent's environment, is the TCP address its serve also listens
	// on (":7433", "0.0.0.0:7433"), behind the secret handshake. The agent's init binds
	// it once and hands it to every serve it starts, so that nothing else can take the
	// port while serve restarts. Without a secret (agent.SecretFile) it is not listened
	// on at all.
	EnvListen = "CWS_AGENT_LISTEN"
	// DefaultPort is the agent's TCP port where the driver names none.
	DefaultPort = 7433
)
